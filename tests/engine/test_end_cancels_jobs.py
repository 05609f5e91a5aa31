"""An instance's end and the cancel of its jobs that wait to run are one statement
(``instance_end_cancelling_waiting_jobs``, L-PAUSE-4): its watch (``task_timeout``) and any pending
``delay_wake`` end ``canceled`` with the instance's end, and a refused end cancels nothing."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine import task_protocol
from app.engine.row_access import lock_instance
from app.engine.transitions import instance_moves
from app.engine.transitions._guard import TransitionRefused
from app.ids import new_id
from app.sql import observing
from tests.engine.helpers import claim_task, complete_task, definition, instance, publish, start

NS = "ns-" + new_id()[:8]


def _jobs(eng: Any, iid: str) -> dict[str, tuple[str, int]]:
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT type::text AS type, status::text AS status, generation FROM workflow_jobs WHERE instance_id = :i"
            ),
            {"i": iid},
        ).all()
    return {r.type: (r.status, r.generation) for r in rows}


def test_a_workflow_that_succeeds_cancels_its_watch_in_its_ends_statement(eng):
    def_id = publish(eng, NS, definition({"key": "a", "kind": "TASK", "queue": "end.q"}))
    iid = start(eng, NS, def_id, {})["id"]
    assert _jobs(eng, iid) == {"task_timeout": ("pending", 1)}
    ran: list[str | None] = []
    with observing(lambda name, sql, params: ran.append(name)):
        complete_task(eng, NS, claim_task(eng, NS, "end.q"), {"ok": 1})
    assert "instance_end_cancelling_waiting_jobs" in ran
    assert "job_cancel_waiting" not in ran and "instance_end" not in ran
    assert instance(eng, iid)["state"] == "SUCCEEDED"
    assert _jobs(eng, iid) == {"task_timeout": ("canceled", 2)}


def test_a_workflow_that_fails_cancels_its_pending_timer(eng):
    doc = definition(
        {"key": "t", "kind": "TIMER", "delay_seconds": 3600},
        {"key": "a", "kind": "TASK", "queue": "end.f", "retry": {"max_attempts": 1}},
    )
    def_id = publish(eng, NS, doc)
    iid = start(eng, NS, def_id, {})["id"]
    assert _jobs(eng, iid)["delay_wake"] == ("pending", 1)
    task = claim_task(eng, NS, "end.f")
    with transaction(eng) as conn:
        task_protocol.fail(conn, NS, task["id"], task["epoch"], {"code": "BOOM", "message": "no"})
    assert instance(eng, iid)["state"] == "FAILED"
    assert _jobs(eng, iid)["delay_wake"] == ("canceled", 2)


def test_a_refused_end_cancels_nothing(eng):
    def_id = publish(eng, NS, definition({"key": "a", "kind": "TASK", "queue": "end.r"}))
    iid = start(eng, NS, def_id, {})["id"]
    with eng.begin() as conn:  # already ended, by hand: the end's guard refuses
        conn.execute(
            text("UPDATE workflow_instances SET state = 'CANCELLED', completed_at = now() WHERE id = :i"),
            {"i": iid},
        )
    with pytest.raises(TransitionRefused), transaction(eng) as conn:
        lock_instance(conn, iid)
        instance_moves.end(conn, iid, "SUCCEEDED", cancel_waiting=(["task_timeout"], "workflow succeeded"))
    assert _jobs(eng, iid) == {"task_timeout": ("pending", 1)}
