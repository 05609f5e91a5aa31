"""OWASP API8:2023 Security Misconfiguration: security headers on every response, the cursor signing
key from configuration with a production refusal, ``make run`` bound to this machine."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from app import settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", ["/healthz", "/v1/workflows", "/nope", "/openapi.json"])
def test_security_headers_on_every_response(wf_ns, path):
    r = httpx.get(wf_ns.url + path, headers={"Authorization": f"Bearer {wf_ns.tokens['all']}"})
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert r.headers["Cache-Control"] == "no-store"
    assert r.headers["X-Frame-Options"] == "DENY"


def test_production_refuses_the_development_cursor_key(monkeypatch):
    from web import create_app

    monkeypatch.setenv("LEDGERFLOW_ENV", "production")
    monkeypatch.setenv(
        "LEDGERFLOW_SECRET_KEY", "k" * 48
    )  # the console's key (tests/unit/test_settings_production.py)
    monkeypatch.delenv("LEDGERFLOW_CURSOR_SECRET", raising=False)
    with pytest.raises(RuntimeError, match="LEDGERFLOW_CURSOR_SECRET"):
        create_app()
    monkeypatch.setenv("LEDGERFLOW_CURSOR_SECRET", "short")
    assert settings.production_problems()
    monkeypatch.setenv("LEDGERFLOW_CURSOR_SECRET", "x" * 48)
    monkeypatch.setenv("LEDGERFLOW_SECRET_KEY", "k" * 48)  # the console's session key
    assert settings.production_problems() == []
    create_app()
    monkeypatch.setenv("LEDGERFLOW_ENV", "development")
    monkeypatch.delenv("LEDGERFLOW_CURSOR_SECRET")
    assert settings.production_problems() == []  # development keeps working with no setting


def test_make_run_binds_localhost_and_the_procfile_all_interfaces():
    procfile = (ROOT / "Procfile").read_text()
    assert "--bind ${LEDGERFLOW_BIND_HOST:-0.0.0.0}:" in procfile
    cli = (ROOT / "ledgerflow" / "cli.py").read_text()
    assert 'os.environ.setdefault("LEDGERFLOW_BIND_HOST", "127.0.0.1")' in cli
