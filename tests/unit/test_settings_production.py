"""Production refuses to start without a console session key (the deploy side of the console's
per-worker key): LEDGERFLOW_ENV=production names every missing secret; development needs none."""

from __future__ import annotations

import pytest

from app import settings as config


def test_production_needs_the_console_session_key(monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_ENV", "production")
    monkeypatch.setenv("LEDGERFLOW_CURSOR_SECRET", "c" * 48)
    monkeypatch.delenv("LEDGERFLOW_SECRET_KEY", raising=False)
    [problem] = config.production_problems()
    assert problem.startswith("LEDGERFLOW_SECRET_KEY is unset or shorter than 32 characters")
    with pytest.raises(RuntimeError, match="LEDGERFLOW_SECRET_KEY"):
        config.refuse_unsafe_production()
    monkeypatch.setenv("LEDGERFLOW_SECRET_KEY", "short")
    assert len(config.production_problems()) == 1
    monkeypatch.setenv("LEDGERFLOW_SECRET_KEY", "k" * 48)
    assert config.production_problems() == []
    monkeypatch.setenv("LEDGERFLOW_ENV", "development")
    monkeypatch.delenv("LEDGERFLOW_SECRET_KEY")
    assert config.production_problems() == []
