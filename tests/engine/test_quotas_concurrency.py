"""Quotas under concurrency (W-START-8, W-ERR): the namespace's start lock is taken last, for the counts and
the commit only, and the caps still hold exactly — concurrent starts never end above them."""

from __future__ import annotations

import threading

from sqlalchemy import text

from app.errors import LimitExceeded, QuotaExceeded
from app.ids import new_id
from tests.engine.helpers import publish, start

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [{"key": "t", "kind": "TASK", "queue": "quota.q"}],
}


def _race(eng, ns: str, def_id: str, n: int) -> tuple[list[str], list[Exception]]:
    ok: list[str] = []
    refused: list[Exception] = []
    gate = threading.Barrier(n)

    def one() -> None:
        gate.wait()
        try:
            ok.append(start(eng, ns, def_id, {})["id"])
        except (LimitExceeded, QuotaExceeded) as exc:
            refused.append(exc)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return ok, refused


def test_concurrent_starts_never_exceed_the_instance_limit(eng, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_INSTANCE_LIMIT", "5")
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, DOC)
    ok, refused = _race(eng, ns, def_id, 12)
    assert len(ok) == 5 and len(refused) == 7
    assert {e.code for e in refused} == {"WORKFLOW_INSTANCE_LIMIT"}
    with eng.connect() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM workflow_instances WHERE namespace_id = :ns AND state <> 'SUCCEEDED'"),
            {"ns": ns},
        ).scalar_one()
        tasks = conn.execute(
            text("SELECT count(*) FROM workflow_tasks WHERE namespace_id = :ns"), {"ns": ns}
        ).scalar_one()
    assert n == 5 and tasks == 5  # the refused starts left nothing behind


def test_concurrent_starts_never_exceed_the_queue_quota(eng, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_QUEUE_PENDING_LIMIT", "3")
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, DOC)
    ok, refused = _race(eng, ns, def_id, 10)
    assert len(ok) == 3 and {e.code for e in refused} == {"QUEUE_FULL"}


def test_concurrent_starts_never_exceed_the_application_quota(eng, monkeypatch):
    """APPLICATION_FULL counts the open tasks from their rows at the check: concurrent starts still end
    exactly where one at a time would (each start is 1 instance + 2 tasks; admitted while the work before
    it is below 10: at 0, 3, 6 and 9 units)."""
    monkeypatch.setenv("LEDGERFLOW_APPLICATION_WORK_LIMIT", "10")
    ns = "ns-" + new_id()[:8]
    two_tasks = {
        **DOC,
        "steps": [
            {"key": "a", "kind": "TASK", "queue": "quota.a"},
            {"key": "b", "kind": "TASK", "queue": "quota.b"},
        ],
    }
    def_id = publish(eng, ns, two_tasks)
    ok, refused = _race(eng, ns, def_id, 10)
    assert len(ok) == 4 and {e.code for e in refused} == {"APPLICATION_FULL"}
    with eng.connect() as conn:
        tasks = conn.execute(
            text("SELECT count(*) FROM workflow_tasks WHERE namespace_id = :ns"), {"ns": ns}
        ).scalar_one()
    assert tasks == 8
