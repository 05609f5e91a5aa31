"""The quota count of unfinished instances (``app.engine.quotas``: written by the engine once per transaction,
at an instance's start and end) always equals what a recount of the rows gives, whatever moves the
instances and tasks went through; a rolled back transaction leaves it untouched; a start's check reads the
counter rows for the instances, not the instance rows; the open tasks are counted from their rows, so no
task change writes a quota row, and a start's own tasks are left out of its check."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine import control, instances, quotas
from app.errors import LimitExceeded, QuotaExceeded
from app.ids import new_id
from tests.engine.helpers import claim_task, complete_task, publish, start

TWO_QUEUES = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "a", "kind": "TASK", "queue": "qc.a"},
        {"key": "b", "kind": "TASK", "queue": "qc.b", "after": ["a"]},
    ],
}

_RECOUNT = """
SELECT (SELECT count(*) FROM workflow_instances WHERE namespace_id = :ns
          AND state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')) AS unfinished,
       (SELECT count(*) FROM workflow_tasks WHERE namespace_id = :ns AND state IN ('PENDING', 'CLAIMED')) AS open_tasks
"""
_COUNTERS = "SELECT COALESCE(sum(unfinished), 0) FROM workflow_quota_counts WHERE namespace_id = :ns"


def _assert_counts_match(eng, ns: str) -> dict:
    """The kept count of unfinished instances equals the recount; returns the recount (and the open tasks)."""
    with eng.connect() as conn:
        truth = dict(conn.execute(text(_RECOUNT), {"ns": ns}).one()._mapping)
        kept = conn.execute(text(_COUNTERS), {"ns": ns}).scalar_one()
    assert kept == truth["unfinished"]
    return truth


def _versions(eng, ns: str) -> set:
    """The row versions (``xmin``) of the namespace's count rows: unchanged when nothing wrote them."""
    with eng.connect() as conn:
        return set(
            conn.execute(
                text("SELECT stripe, xmin::text FROM workflow_quota_counts WHERE namespace_id = :ns"),
                {"ns": ns},
            ).all()
        )


def test_counts_follow_every_move_of_instances_and_tasks(eng):
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, TWO_QUEUES)
    rng = random.Random(16)
    live: list[str] = []
    for _ in range(40):
        move = rng.choice(["start", "start", "claim_a", "complete_a", "claim_b", "complete_b", "cancel"])
        try:
            if move == "start":
                live.append(start(eng, ns, def_id, {})["id"])
            elif move.startswith("claim"):
                claim_task(eng, ns, "qc." + move[-1])
            elif move.startswith("complete"):
                task = claim_task(eng, ns, "qc." + move[-1])
                complete_task(eng, ns, task, {"ok": True})
            elif live:
                iid = live.pop(rng.randrange(len(live)))
                with transaction(eng) as conn:
                    rev = conn.execute(
                        text("SELECT control_revision FROM workflow_instances WHERE id = :i"), {"i": iid}
                    ).scalar_one()
                    control.control(
                        conn, iid, {"operation": "CANCEL", "expected_control_revision": rev, "reason": "test"}
                    )
        except AssertionError:  # nothing to claim on that queue right now
            pass
        _assert_counts_match(eng, ns)
    truth = _assert_counts_match(eng, ns)
    assert truth["unfinished"] > 0 and truth["open_tasks"] > 0  # the walk left work open


def test_a_rolled_back_start_adds_nothing(eng):
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, TWO_QUEUES)
    start(eng, ns, def_id, {})

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction(eng) as conn:
        instances.start_workflow(conn, ns, {"definition_id": def_id, "version": "v1", "input": {}})
        raise Boom
    assert _assert_counts_match(eng, ns)["unfinished"] == 1


def test_the_check_reads_the_counters_not_the_rows(eng, monkeypatch):
    """The instance cap is enforced from the counters: a namespace whose counters say it is full is
    refused even with no instance rows, and rows the counters do not know about are not counted."""
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, TWO_QUEUES)
    monkeypatch.setenv("LEDGERFLOW_INSTANCE_LIMIT", "3")
    with eng.begin() as conn:
        conn.execute(
            text("INSERT INTO workflow_quota_counts (namespace_id, stripe, unfinished) VALUES (:ns, 99, 3)"),
            {"ns": ns},
        )
    with pytest.raises(LimitExceeded):
        start(eng, ns, def_id, {})
    with eng.begin() as conn:
        conn.execute(text("DELETE FROM workflow_quota_counts WHERE stripe = 99"))
    for _ in range(3):
        start(eng, ns, def_id, {})
    with pytest.raises(LimitExceeded):
        start(eng, ns, def_id, {})


def test_drift_is_found_and_repaired(eng):
    """A write that bypasses the engine (here a TRUNCATE of the counters) is what ``ledgerflow doctor``
    reports, and ``ledgerflow db repair-quota-counts`` recounts from the rows."""
    from click.testing import CliRunner

    from ledgerflow.cli import main
    from ledgerflow.doctor import check_quota_counts

    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, TWO_QUEUES)
    for _ in range(3):
        start(eng, ns, def_id, {})
    claim_task(eng, ns, "qc.a")
    with eng.connect() as conn:
        assert quotas.drift(conn) == []
    assert check_quota_counts()[0].status == "ok"
    with eng.begin() as conn:
        conn.execute(text("TRUNCATE workflow_quota_counts"))
    with eng.connect() as conn:
        drift = {d["what"]: (d["kept"], d["counted"]) for d in quotas.drift(conn)}
    assert drift == {"unfinished": (0, 3)}
    check = check_quota_counts()[0]
    assert check.status == "fail" and "repair-quota-counts" in check.fix
    r = CliRunner().invoke(main, ["db", "repair-quota-counts"])
    assert r.exit_code == 0, r.output
    assert "recounted" in r.output
    _assert_counts_match(eng, ns)
    with eng.connect() as conn:
        assert quotas.drift(conn) == []


def test_no_task_change_writes_a_quota_row(eng):
    """The open tasks are counted from their rows: a task's claim, its completion (which opens the next task,
    here on another queue) and its failure write no quota row; only an instance's start and end do.
    Unchanged row versions (``xmin``) of the namespace's count rows show that nothing was written."""
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, TWO_QUEUES)
    start(eng, ns, def_id, {})
    before = _versions(eng, ns)
    task = claim_task(eng, ns, "qc.a")
    assert _versions(eng, ns) == before
    complete_task(eng, ns, task, {"ok": True})  # a closes, b opens on qc.b
    assert _versions(eng, ns) == before
    assert _assert_counts_match(eng, ns) == {"unfinished": 1, "open_tasks": 1}
    complete_task(eng, ns, claim_task(eng, ns, "qc.b"), {"ok": True})  # the end: -1 instance
    assert _versions(eng, ns) != before
    assert _assert_counts_match(eng, ns) == {"unfinished": 0, "open_tasks": 0}


def test_the_check_counts_open_tasks_from_the_rows_without_the_starts_own(eng, monkeypatch):
    """QUEUE_FULL and APPLICATION_FULL come from the task rows as they are when the start checks: tasks
    closed behind the engine's back free the quota at once (no count to drift), and the start's own tasks,
    already inserted when it checks, are not counted (a start into an empty queue of quota 1 passes)."""
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, TWO_QUEUES)
    monkeypatch.setenv("LEDGERFLOW_QUEUE_PENDING_LIMIT", "1")
    start(eng, ns, def_id, {})  # its own task on qc.a is not counted against it
    with pytest.raises(QuotaExceeded) as e:
        start(eng, ns, def_id, {})
    assert e.value.code == "QUEUE_FULL"
    with eng.begin() as conn:
        conn.execute(
            text("UPDATE workflow_tasks SET state = 'CANCELLED' WHERE namespace_id = :ns"), {"ns": ns}
        )
    start(eng, ns, def_id, {})
    monkeypatch.setenv("LEDGERFLOW_QUEUE_PENDING_LIMIT", "100")
    monkeypatch.setenv("LEDGERFLOW_APPLICATION_WORK_LIMIT", "4")  # 2 unfinished + 1 open task: 3 units
    start(eng, ns, def_id, {})  # 3 unfinished + 2 open tasks: full
    with pytest.raises(QuotaExceeded) as e:
        start(eng, ns, def_id, {})
    assert e.value.code == "APPLICATION_FULL"


def test_a_queue_quota_counts_its_queue_whatever_the_namespace_holds(eng, monkeypatch):
    """The check counts a queue's tasks only when the namespace holds enough open tasks to fill it; then it
    counts that queue's, not the namespace's: tasks of other queues never fill it."""
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, TWO_QUEUES)  # opens a task on qc.a
    other = publish(
        eng, ns, {**TWO_QUEUES, "steps": [{"key": "x", "kind": "TASK", "queue": "qc.other"}]}, name="other"
    )
    for _ in range(4):
        start(eng, ns, other, {})
    monkeypatch.setenv("LEDGERFLOW_QUEUE_PENDING_LIMIT", "2")  # the namespace's 4 open tasks could fill it
    start(eng, ns, def_id, {})
    start(eng, ns, def_id, {})  # qc.a: 1 pending before it
    with pytest.raises(QuotaExceeded) as e:
        start(eng, ns, def_id, {})  # qc.a: 2
    assert e.value.code == "QUEUE_FULL" and "'qc.a'" in str(e.value)
    monkeypatch.setenv("LEDGERFLOW_QUEUE_PENDING_LIMIT", "7")  # the namespace's 6 cannot: not counted
    start(eng, ns, def_id, {})
