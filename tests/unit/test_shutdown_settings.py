"""The shutdown grace setting (issue 30): every process is out within 25 s of SIGTERM, so the grace
given to running handlers and requests is 20 s at most."""

from __future__ import annotations

import pytest

from app.config import MAX_SHUTDOWN_GRACE_SECONDS, load_settings


def test_the_shutdown_grace_is_20_s_at_most(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://x@127.0.0.1/x")
    monkeypatch.delenv("LEDGERFLOW_SHUTDOWN_GRACE_SECONDS", raising=False)
    assert load_settings().shutdown_grace_seconds == MAX_SHUTDOWN_GRACE_SECONDS == 20
    monkeypatch.setenv("LEDGERFLOW_SHUTDOWN_GRACE_SECONDS", "5")
    assert load_settings().shutdown_grace_seconds == 5
    monkeypatch.setenv("LEDGERFLOW_SHUTDOWN_GRACE_SECONDS", "29")
    with pytest.raises(ValueError, match="0 to 20 seconds"):
        load_settings()
