"""The quota counts (``app.engine.quotas``: written by the engine once per transaction) always equal what a
recount of the rows gives, whatever moves the instances and tasks went through; a rolled back transaction
leaves them untouched; a start's check reads counter rows, not the namespace's rows; and a transaction whose
changes cancel out writes no count."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine import control, instances, quotas
from app.errors import LimitExceeded
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
       (SELECT count(*) FROM workflow_tasks WHERE namespace_id = :ns AND state IN ('PENDING', 'CLAIMED')) AS open_tasks,
       (SELECT COALESCE(jsonb_object_agg(queue, c), '{}'::jsonb) FROM (
            SELECT queue, count(*) AS c FROM workflow_tasks WHERE namespace_id = :ns
            AND state IN ('PENDING', 'CLAIMED') GROUP BY queue) x) AS open_by_queue
"""
_COUNTERS = """
SELECT COALESCE(sum(unfinished), 0) AS unfinished, COALESCE(sum(open_tasks), 0) AS open_tasks,
       COALESCE((SELECT jsonb_object_agg(k, s) FROM (
            SELECT k, sum(v::bigint) AS s FROM workflow_quota_counts, jsonb_each_text(open_by_queue) AS e(k, v)
            WHERE namespace_id = :ns GROUP BY k HAVING sum(v::bigint) <> 0) y), '{}'::jsonb) AS open_by_queue
FROM workflow_quota_counts WHERE namespace_id = :ns
"""


def _assert_counts_match(eng, ns: str) -> dict:
    with eng.connect() as conn:
        truth = dict(conn.execute(text(_RECOUNT), {"ns": ns}).one()._mapping)
        kept = dict(conn.execute(text(_COUNTERS), {"ns": ns}).one()._mapping)
    assert {
        k: int(v) if k != "open_by_queue" else {q: int(n) for q, n in v.items()} for k, v in kept.items()
    } == truth
    return truth


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
    assert drift == {"unfinished": (0, 3), "open_tasks": (0, 3), "open:qc.a": (0, 3)}
    check = check_quota_counts()[0]
    assert check.status == "fail" and "repair-quota-counts" in check.fix
    r = CliRunner().invoke(main, ["db", "repair-quota-counts"])
    assert r.exit_code == 0, r.output
    assert "recounted" in r.output
    _assert_counts_match(eng, ns)
    with eng.connect() as conn:
        assert quotas.drift(conn) == []


def test_a_task_step_that_opens_the_next_task_on_its_queue_writes_no_count(eng):
    """The counts are written once per transaction, and not at all when its changes cancel out:
    completing task ``a`` opens ``b`` on the same queue (open tasks -1 +1); a claim changes no count.
    Unchanged row versions (``xmin``) of the namespace's count rows show that nothing was written."""
    same_queue = {
        **TWO_QUEUES,
        "steps": [
            {**TWO_QUEUES["steps"][0], "queue": "qc.same"},
            {**TWO_QUEUES["steps"][1], "queue": "qc.same"},
        ],
    }
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, same_queue)
    start(eng, ns, def_id, {})

    def versions() -> set:
        with eng.connect() as conn:
            return set(
                conn.execute(
                    text("SELECT stripe, xmin::text FROM workflow_quota_counts WHERE namespace_id = :ns"),
                    {"ns": ns},
                ).all()
            )

    before = versions()
    task = claim_task(eng, ns, "qc.same")
    complete_task(eng, ns, task, {"ok": True})
    assert versions() == before
    assert _assert_counts_match(eng, ns)["open_tasks"] == 1
    complete_task(eng, ns, claim_task(eng, ns, "qc.same"), {"ok": True})  # the end: -1 task, -1 instance
    assert versions() != before
    assert _assert_counts_match(eng, ns) == {"unfinished": 0, "open_tasks": 0, "open_by_queue": {}}
