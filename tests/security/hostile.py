"""Helpers of the second hostile-tenant round: real credentials (the acting author of a rule,
schedule or subscription is checked against the credentials table), the outbound jobs run inline
(claim -> handler -> settle, as the pool does) and SQL reads. Written against the public API of
``app`` so that each test also runs, and fails, on the code before the fix."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.auth import ALL_SCOPES, Principal, create_credential
from app.db import get_engine, transaction
from tests.ledger_helpers import credential_change_heard

OUT = "workflow-ledger-outbound"
TIMER_DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 3600,
    "steps": [{"key": "wait", "kind": "TIMER", "delay_seconds": 3600}],
}


@dataclass(frozen=True)
class Author:
    token: str
    credential_id: str
    principal: Principal

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def author(namespace: str, scopes: Any = ALL_SCOPES, *, ns_id: str | None = None) -> Author:
    """A live credential of ``namespace``; its principal acts in namespace id ``ns_id`` (default: the
    namespace's own id)."""
    with transaction() as conn:
        issued = create_credential(
            conn, namespace=namespace, name="a-" + uuid.uuid4().hex[:10], scopes=sorted(scopes)
        )
    p = Principal(
        issued.credential_id,
        issued.name,
        ns_id or issued.namespace_id,
        namespace,
        frozenset(issued.scopes),
        None,
    )
    return Author(issued.token, issued.credential_id, p)


def revoke(credential_id: str) -> None:
    with credential_change_heard():
        sql("UPDATE credentials SET revoked_at = now() WHERE id = :i", i=credential_id)


def sql(query: str, **params: Any) -> list:
    with get_engine().begin() as conn:
        res = conn.execute(text(query), params)
        return res.all() if res.returns_rows else []


@pytest.fixture
def outbound(eng) -> Iterator[Any]:
    """The engine fixture with the outbound handlers (event fan-out, webhooks, rules) registered."""
    import app.engine.handlers.compensation
    import app.integrations.actions
    import app.integrations.webhooks
    from app.ledger import handlers

    for name, fn in (
        ("event_dispatch", app.integrations.webhooks.event_dispatch),
        ("webhook_delivery", app.integrations.webhooks.webhook_delivery),
        ("automation_action", app.integrations.actions.automation_action),
        ("compensation_action", app.engine.handlers.compensation.compensation_action),
    ):
        handlers.register(name, fn, replace=True)
    yield eng


def drain_outbound(eng, limit: int = 200) -> list[tuple[str, str]]:
    """Run due outbound jobs inline until none is due (at most ``limit``)."""
    from tests.engine.helpers import run_jobs

    return run_jobs(eng, queue=OUT, limit=limit)


def due_outbound() -> int:
    return sql(
        "SELECT count(*) FROM workflow_jobs WHERE queue = :q AND status = 'pending' AND run_at <= now()",
        q=OUT,
    )[0][0]


@contextmanager
def procfile_web(metrics_dir: Path, **env: str) -> Iterator[str]:
    """The Procfile's ``web`` command (its gunicorn config: the serving model), one worker, on a free
    local port, with ``env`` added; yields its URL once ``/healthz`` answers."""
    from tests.conftest import ROOT

    line = next(ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith("web:"))
    assert "--config gunicorn.conf.py" in line
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    proc = subprocess.Popen(
        [
            gunicorn,
            "--config",
            "gunicorn.conf.py",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--no-control-socket",
            "web:create_app()",
        ],
        cwd=ROOT,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
