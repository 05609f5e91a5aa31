"""The hostile-tenant suite, one module per OWASP API Security Top 10 (2023) item. It
reuses the live-server fixtures of the workflow API tests (real WSGI app, real PostgreSQL), and the
engine fixture with the outbound jobs run inline (``tests.security.hostile``)."""

from tests.engine.conftest import eng  # noqa: F401
from tests.security.hostile import outbound  # noqa: F401
from tests.web.wf_live import wf_ns, wf_server  # noqa: F401
from tests.web.wf_ops import ops  # noqa: F401
