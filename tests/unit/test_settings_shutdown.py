"""The shutdown grace setting: every process is out within 25 s of SIGTERM, so the grace
given to running handlers and requests is 20 s at most, refused above that like any bad value."""

from __future__ import annotations

import pytest

from app import settings


def test_the_shutdown_grace_is_20_s_at_most(monkeypatch):
    monkeypatch.delenv("LEDGERFLOW_SHUTDOWN_GRACE_SECONDS", raising=False)
    assert settings.SHUTDOWN_GRACE_SECONDS.get() == 20
    assert settings.Settings(database_url="x", redis_url=None).shutdown_grace_seconds == 20
    monkeypatch.setenv("LEDGERFLOW_SHUTDOWN_GRACE_SECONDS", "5")
    assert settings.SHUTDOWN_GRACE_SECONDS.get() == 5
    monkeypatch.setenv("LEDGERFLOW_SHUTDOWN_GRACE_SECONDS", "29")
    with pytest.raises(
        settings.SettingError, match="LEDGERFLOW_SHUTDOWN_GRACE_SECONDS: must be a number from 0 to 20"
    ):
        settings.validate()
