"""The instance row is written at most once per transaction (issue 27): a start inserts it as it settles
(RUNNING at revision 2, the revision a start has always answered) and does not update it when its first
steps leave it RUNNING; a start whose first steps wait writes the state once more, without a second bump;
every later transaction of a workflow updates it once. Counted with the transaction's own statistics
(``pg_stat_xact_user_tables``), read at the transaction's beginning and before it commits (the view also
holds what earlier transactions of the same backend have not flushed yet: the difference is this one's)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from app.db import transaction
from app.engine import instances, task_protocol
from app.ids import new_id
from tests.engine.helpers import instance, publish

TASK_TASK = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "a", "kind": "TASK", "queue": "iw.q"},
        {"key": "b", "kind": "TASK", "queue": "iw.q", "after": ["a"]},
    ],
}
TIMER_FIRST = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "w", "kind": "TIMER", "delay_seconds": 1},
        {"key": "a", "kind": "TASK", "queue": "iw.q", "after": ["w"]},
    ],
}


def _instance_writes(conn: Connection) -> tuple[int, int]:
    """(inserts, updates) of ``workflow_instances`` by this transaction so far."""
    row = conn.execute(
        text("SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'workflow_instances'")
    ).one()
    return row.n_tup_ins, row.n_tup_upd


def _since(conn: Connection, before: tuple[int, int]) -> tuple[int, int]:
    ins, upd = _instance_writes(conn)
    return ins - before[0], upd - before[1]


def _start(eng, ns: str, def_id: str) -> tuple[dict, tuple[int, int]]:
    with transaction(eng) as conn:
        before = _instance_writes(conn)
        started = instances.start_workflow(conn, ns, {"definition_id": def_id, "version": "v1", "input": {}})
        writes = _since(conn, before)
    return started, writes


def _events(eng, iid: str) -> list[str]:
    with eng.connect() as conn:
        return list(
            conn.execute(
                text("SELECT type FROM workflow_events WHERE instance_id = :i ORDER BY seq"), {"i": iid}
            ).scalars()
        )


def test_a_start_that_leaves_the_instance_running_inserts_it_once_and_updates_nothing(eng):
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, TASK_TASK)
    started, writes = _start(eng, ns, def_id)
    assert writes == (1, 0)
    view = instance(eng, started["id"])
    assert view["state"] == "RUNNING" and view["revision"] == "2"
    assert started["revision"] == 2 and started["updated_at"] == started["created_at"]
    events = _events(eng, started["id"])
    assert events[0] == "workflow.started" and "task.created" in events
    assert not {"workflow.running", "workflow.waiting"} & set(events)  # no move of the state to tell


def test_a_start_whose_first_step_waits_writes_the_state_once_without_a_second_bump(eng):
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, TIMER_FIRST)
    started, writes = _start(eng, ns, def_id)
    assert writes == (1, 1)
    view = instance(eng, started["id"])
    assert view["state"] == "WAITING" and view["revision"] == "2"
    assert _events(eng, started["id"])[-1] == "workflow.waiting"


def test_each_later_transaction_updates_the_instance_once(eng):
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, TASK_TASK)
    started, _ = _start(eng, ns, def_id)

    def complete(task: dict) -> Any:
        with transaction(eng) as conn:
            before = _instance_writes(conn)
            task_protocol.complete(conn, ns, task["id"], task["epoch"], {"ok": True})
            return _since(conn, before)

    def claim() -> dict:
        with transaction(eng) as conn:
            before = _instance_writes(conn)
            [task] = task_protocol.claim(conn, ns, ["iw.q"], 1, 60.0)
            assert _since(conn, before) == (0, 0)  # a claim does not touch the instance
        return task

    assert complete(claim()) == (0, 1)  # a closes, b is activated: one move
    assert complete(claim()) == (0, 1)  # b closes: the end
    view = instance(eng, started["id"])
    assert view["state"] == "SUCCEEDED" and view["revision"] == "4"
