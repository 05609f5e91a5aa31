"""A step's first activation and the instance's RUNNING <-> WAITING move that follows it are one statement
(``step_activate_first[_with_jobs]_progress``): a completion or a timer's firing that activates the next
step sends no ``instance_set_progress`` of its own, and writes the same rows, revisions and events as the
two statements did."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine import snapshot
from app.engine.row_access import lock_instance
from app.engine.transitions import step_moves
from app.engine.transitions._guard import TransitionRefused
from app.ids import new_id
from app.sql import observing
from tests.engine.helpers import (
    claim_task,
    complete_task,
    definition,
    instance,
    make_due,
    publish,
    run_jobs,
    start,
)

NS = "ns-" + new_id()[:8]
DOC = definition(
    {"key": "a", "kind": "TASK", "queue": "ap.q"},
    {"key": "t", "kind": "TIMER", "delay_seconds": 0, "after": ["a"]},
    {"key": "b", "kind": "TASK", "queue": "ap.q", "after": ["t"]},
    {"key": "c", "kind": "TASK", "queue": "ap.q", "after": ["b"]},
)


def _names(run: Any) -> list[str | None]:
    ran: list[str | None] = []
    with observing(lambda name, sql, params: ran.append(name)):
        run()
    return ran


def _events(eng: Any, iid: str) -> list[tuple[str, str]]:
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT type, body ->> 'step_key' AS key FROM workflow_events WHERE instance_id = :i ORDER BY seq"
            ),
            {"i": iid},
        ).all()
    return [(r.type, r.key) for r in rows]


def test_each_activation_writes_the_instances_move_in_its_own_statement(eng):
    def_id = publish(eng, NS, DOC)
    iid = start(eng, NS, def_id, {})["id"]
    revision = int(instance(eng, iid)["revision"])

    # a -> t: the TIMER's activation with its wake job and the instance's move to WAITING
    ran = _names(lambda: complete_task(eng, NS, claim_task(eng, NS, "ap.q"), {"ok": 1}))
    assert "step_activate_first_with_jobs_progress" in ran and "instance_set_progress" not in ran
    inst = instance(eng, iid)
    assert inst["state"] == "WAITING" and int(inst["revision"]) == revision + 1
    # t fires -> b: the TASK's activation and the move back to RUNNING
    make_due(eng)
    ran = _names(lambda: run_jobs(eng))
    assert "step_activate_first_progress" in ran and "instance_set_progress" not in ran
    inst = instance(eng, iid)
    assert inst["state"] == "RUNNING" and int(inst["revision"]) == revision + 2
    # b -> c: RUNNING stays RUNNING, the revision moves (as the separate move did) and no event says so
    ran = _names(lambda: complete_task(eng, NS, claim_task(eng, NS, "ap.q"), {"ok": 2}))
    assert "step_activate_first_progress" in ran and "instance_set_progress" not in ran
    assert int(instance(eng, iid)["revision"]) == revision + 3
    complete_task(eng, NS, claim_task(eng, NS, "ap.q"), {"ok": 3})
    assert instance(eng, iid)["state"] == "SUCCEEDED"
    # the events in the order the two statements gave them: each activation, then the instance's move
    assert _events(eng, iid) == [
        ("workflow.started", None),
        ("task.created", "a"),
        ("step.activated", "a"),
        ("task.completed", "a"),
        ("step.succeeded", "a"),
        ("step.activated", "t"),
        ("workflow.waiting", None),
        ("step.succeeded", "t"),
        ("task.created", "b"),
        ("step.activated", "b"),
        ("workflow.running", None),
        ("task.completed", "b"),
        ("step.succeeded", "b"),
        ("task.created", "c"),
        ("step.activated", "c"),
        ("task.completed", "c"),
        ("step.succeeded", "c"),
        ("workflow.succeeded", None),
    ]


def test_a_start_and_parallel_steps_keep_their_statements(eng):
    """A start writes its instance as its first steps leave it (no move to merge); of two steps activated
    together only the last one's statement carries the move."""
    doc = definition(
        {"key": "a", "kind": "TASK", "queue": "ap.p"},
        {"key": "b", "kind": "TASK", "queue": "ap.p", "after": ["a"]},
        {"key": "c", "kind": "TASK", "queue": "ap.p", "after": ["a"]},
    )
    def_id = publish(eng, NS, doc)
    ran: list[str | None] = []
    with observing(lambda name, sql, params: ran.append(name)):
        iid = start(eng, NS, def_id, {})["id"]
    assert "instance_set_progress" not in ran and not any(n and n.endswith("_progress") for n in ran)
    ran = _names(lambda: complete_task(eng, NS, claim_task(eng, NS, "ap.p"), {"ok": 1}))
    assert ran.count("step_activate_first") == 1 and ran.count("step_activate_first_progress") == 1
    assert "instance_set_progress" not in ran
    assert {s["key"]: s["state"] for s in _steps(eng, iid)} == {
        "a": "SUCCEEDED",
        "b": "ACTIVE",
        "c": "ACTIVE",
    }


def _steps(eng: Any, iid: str) -> list[dict]:
    with eng.connect() as conn:
        return list(snapshot.load(conn, iid)[2].values())


def test_an_instance_that_may_not_move_refuses_the_activation_too(eng):
    """The instance's guard (the advancing states) refuses the statement: neither the step's row nor the
    move is written (the transaction rolls back)."""
    def_id = publish(eng, NS, DOC)
    iid = start(eng, NS, def_id, {})["id"]
    with eng.begin() as conn:  # a state the move may not leave
        conn.execute(text("UPDATE workflow_instances SET state = 'NEEDS_REVIEW' WHERE id = :i"), {"i": iid})
    with pytest.raises(TransitionRefused, match="instance -> WAITING"), transaction(eng) as conn:
        lock_instance(conn, iid)
        rows = snapshot.load(conn, iid)[2]
        act = step_moves.insert_activation(conn, rows["t"], {"delay_seconds": 0})
        step_moves.activate(conn, iid, rows["t"], "WAITING", act, progress="WAITING")
    inst = instance(eng, iid)
    assert inst["state"] == "NEEDS_REVIEW"
    assert "t" not in {s["key"] for s in _steps(eng, iid) if s.get("stored") is not False}
