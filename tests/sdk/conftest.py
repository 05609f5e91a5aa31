"""The SDK against a live server: the real WSGI app on a real port over the session's PostgreSQL."""

from __future__ import annotations

from tests.web.wf_live import wf_ns, wf_server  # noqa: F401 - fixtures
