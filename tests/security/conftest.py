"""The hostile-tenant suite (issue 9), one module per OWASP API Security Top 10 (2023) item. It reuses
the live-server fixtures of the workflow API tests (real WSGI app, real PostgreSQL)."""

from tests.web.wf_live import wf_ns, wf_server  # noqa: F401
from tests.web.wf_ops import ops  # noqa: F401
