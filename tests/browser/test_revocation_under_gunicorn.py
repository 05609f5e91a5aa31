"""Kept tokens under the Procfile's ``web`` (gunicorn, 2 gevent workers): each worker's LISTEN connection
(``web.listener``, a greenlet) hears credential changes, and a revocation made by another process, the
operator's ``ledgerflow credentials revoke``, ends the token in both workers. No browser: this folder holds
the fixture that runs the Procfile's ``web`` line (tests/browser/conftest.py). Waits are for conditions
with generous deadlines; nothing asserts a duration."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import httpx
from sqlalchemy import text

from app.auth import Scope, create_credential
from app.db import get_engine, transaction
from tests.browser.conftest import ROOT, _children
from tests.ledger_helpers import wait_for

REQUESTS = 20  # each on a new connection, so that both workers serve some


def _statuses(url: str, token: str) -> list[int]:
    return [
        httpx.get(f"{url}/v1/workflows", headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code
        for _ in range(REQUESTS)
    ]


def _listening(pids: list[int]) -> int:
    """How many of the processes ``pids`` have a LISTEN connection hearing credential changes."""
    with get_engine().connect() as conn:
        return conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN lf_credentials' "
                "AND application_name = ANY(:names)"
            ),
            {"names": [f"ledgerflow-listener-{pid}" for pid in pids]},
        ).scalar_one()


def test_a_revocation_by_the_cli_ends_the_token_in_both_workers(procfile_web: dict[str, Any]) -> None:
    url = procfile_web["url"]
    with transaction() as conn:
        issued = create_credential(
            conn, namespace="revoke-" + os.urandom(3).hex(), name="reader", scopes=[Scope.WORKFLOWS_READ]
        )
    assert set(_statuses(url, issued.token)) == {200}
    workers = _children(procfile_web["pid"])
    assert len(workers) == 2
    wait_for(lambda: _listening(workers) == 2, timeout=60)  # each worker's, started by its first request
    assert set(_statuses(url, issued.token)) == {200}  # now kept by the workers that served them

    revoked = subprocess.run(
        [sys.executable, "-m", "ledgerflow.cli", "credentials", "revoke", issued.credential_id],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert revoked.returncode == 0, revoked.stderr
    # the notification reaches each worker milliseconds after the commit (a kept token lasts 5 s at most
    # anyway: that it is the notification is shown in tests/web/test_principal_cache.py)
    wait_for(lambda: set(_statuses(url, issued.token)) == {401}, timeout=30)
