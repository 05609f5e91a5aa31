"""task_timeout (retry policy, then FAILED), the overall deadline, POLL exhaustion, and a retried
job never advancing a step twice (effect receipts)."""

from __future__ import annotations

from sqlalchemy import text

from app.ids import new_id
from tests.engine.helpers import claim_task, complete_task, instance, make_due, publish, run_jobs, start, step

NS = "ns-" + new_id()[:8]


def _expire_tasks(eng) -> None:
    with eng.begin() as conn:
        conn.execute(
            text(
                "UPDATE workflow_tasks SET deadline_at = now() - interval '1 ms' "
                "WHERE state IN ('PENDING', 'CLAIMED')"
            )
        )
        conn.execute(
            text(
                "UPDATE workflow_jobs SET run_at = now() - interval '1 ms' "
                "WHERE status = 'pending' AND type = 'task_timeout'"
            )
        )


def test_task_timeout_retries_then_fails(eng):
    def_id = publish(
        eng,
        NS,
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 600,
            "steps": [
                {"key": "t", "kind": "TASK", "queue": "q", "timeout_seconds": 5, "retry": {"max_attempts": 2}}
            ],
        },
    )
    iid = start(eng, NS, def_id, {})["id"]
    first = step(eng, NS, iid, "t")["step"]["task_id"]
    _expire_tasks(eng)
    assert ("task_timeout", "succeeded") in run_jobs(eng)
    # the retry policy's backoff (default 30 s): the step waits for attempt 2
    waiting = step(eng, NS, iid, "t")
    assert waiting["step"]["state"] == "WAITING" and "next_attempt_at" in waiting
    assert instance(eng, iid)["state"] == "WAITING"
    make_due(eng)
    run_jobs(eng)
    second = step(eng, NS, iid, "t")["step"]["task_id"]
    assert second != first and instance(eng, iid)["state"] == "RUNNING"
    _expire_tasks(eng)
    run_jobs(eng)
    inst = instance(eng, iid)
    assert inst["state"] == "FAILED" and inst["stop_kind"] == "FAILURE"
    assert step(eng, NS, iid, "t")["error"]["code"] == "TASK_TIMEOUT"


def test_deadline_fails_the_instance(eng):
    def_id = publish(
        eng,
        NS,
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 1,
            "steps": [
                {"key": "t", "kind": "TASK", "queue": "q"},
                {"key": "w", "kind": "TIMER", "delay_seconds": 3600},
            ],
        },
    )
    iid = start(eng, NS, def_id, {})["id"]
    with eng.begin() as conn:
        conn.execute(
            text("UPDATE workflow_instances SET deadline_at = now() - interval '1 ms' WHERE id = :id"),
            {"id": iid},
        )
        conn.execute(
            text(
                "UPDATE workflow_jobs SET run_at = now() WHERE instance_id = :id AND type = 'task_timeout' "
                "AND status = 'pending'"
            ),
            {"id": iid},
        )
    run_jobs(eng)
    inst = instance(eng, iid)
    assert inst["state"] == "FAILED" and inst["stop_kind"] == "FAILURE" and "completed_at" in inst
    assert step(eng, NS, iid, "t")["step"]["state"] == "CANCELLED"
    assert step(eng, NS, iid, "w")["wait"]["state"] == "CANCELLED"
    with eng.connect() as conn:
        pending = conn.execute(
            text("SELECT count(*) FROM workflow_jobs WHERE instance_id = :id AND status = 'pending'"),
            {"id": iid},
        ).scalar()
        open_tasks = conn.execute(
            text("SELECT count(*) FROM workflow_tasks WHERE instance_id = :id AND state = 'PENDING'"),
            {"id": iid},
        ).scalar()
    assert pending == 0 and open_tasks == 0


def test_poll_rounds_exhausted(eng):
    def_id = publish(
        eng,
        NS,
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 600,
            "steps": [
                {
                    "key": "p",
                    "kind": "POLL",
                    "queue": "pq",
                    "interval_ms": 10,
                    "max_rounds": 2,
                    "max_attempts_per_round": 2,
                }
            ],
        },
    )
    iid = start(eng, NS, def_id, {})["id"]
    t = claim_task(eng, NS, "pq")
    from app.db import transaction
    from app.engine import task_protocol

    with transaction(eng) as conn:  # a failed attempt retries within the round
        task_protocol.fail(conn, NS, t["id"], t["epoch"], {"message": "x", "retryable": True})
    p = step(eng, NS, iid, "p")["poll"]
    assert p["used_rounds"] == 0 and p["first_round_attempts_used"] == 2 and p["current_task_id"] != t["id"]
    complete_task(eng, NS, claim_task(eng, NS, "pq"), {"done": False})
    make_due(eng)
    run_jobs(eng)
    p = step(eng, NS, iid, "p")["poll"]
    assert p["used_rounds"] == 1 and p["first_round_attempts_used"] == 2 and "current_task_id" in p
    complete_task(eng, NS, claim_task(eng, NS, "pq"), {"done": False})
    assert instance(eng, iid)["state"] == "FAILED"
    assert step(eng, NS, iid, "p")["error"]["code"] == "POLL_EXHAUSTED"


def test_retried_timer_job_advances_once(eng):
    """The timer's write and its receipt (the wait, resolved by the job's operation) commit together; a
    second run of the same operation reuses it."""
    from app.ledger import handlers
    from tests.ledger_helpers import claim, context_for

    def_id = publish(
        eng,
        NS,
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 600,
            "steps": [
                {"key": "w", "kind": "TIMER", "delay_seconds": 0},
                {"key": "t", "kind": "TASK", "queue": "q", "after": ["w"]},
            ],
        },
    )
    iid = start(eng, NS, def_id, {})["id"]
    make_due(eng)
    [row] = [
        r for r in claim(eng, limit=5) if r["type"] == "delay_wake" and r["payload"].get("wake") == "timer"
    ]
    ctx = context_for(row, eng)
    handlers.resolve("delay_wake")(ctx)
    rev = instance(eng, iid)["revision"]
    handlers.resolve("delay_wake")(context_for(row, eng))  # same operation again (a retry)
    assert instance(eng, iid)["revision"] == rev
    with eng.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM workflow_tasks WHERE instance_id = :id"), {"id": iid}
            ).scalar()
            == 1
        )


def test_signal_wait_times_out(eng):
    def_id = publish(
        eng,
        NS,
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 600,
            "signals": [{"name": "done", "payload_version": "v1", "schema": {}}],
            "steps": [
                {
                    "key": "s",
                    "kind": "SIGNAL",
                    "signal": "done",
                    "payload_version": "v1",
                    "correlation": "$.business_key",
                    "timeout_seconds": 5,
                }
            ],
        },
    )
    iid = start(eng, NS, def_id, {}, business_key="b ")["id"]
    assert step(eng, NS, iid, "s")["wait"]["correlation_key"] == "b "
    with eng.begin() as conn:
        conn.execute(text("UPDATE workflow_waits SET deadline_at = now() - interval '1 ms'"))
    make_due(eng)
    run_jobs(eng)
    s = step(eng, NS, iid, "s")
    assert (
        s["step"]["state"] == "FAILED"
        and s["wait"]["state"] == "EXPIRED"
        and s["error"]["code"] == "SIGNAL_TIMEOUT"
    )
    assert instance(eng, iid)["state"] == "FAILED"
