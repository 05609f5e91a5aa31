"""A worker's shutdown: ``transitions.hand_back`` (running -> pending, due at once, the attempt
recorded as interrupted by shutdown, not a failure) and ``LedgerPool.stop``'s grace, with real
PostgreSQL. The worker processes themselves: tests/workers/test_shutdown.py."""

from __future__ import annotations

import threading
from dataclasses import replace

from app.db import transaction
from app.ledger import handlers, transitions
from app.ledger.pool import LedgerPool
from app.ledger.states import EXTERNAL_OUTCOME_UNKNOWN, WORKER_SHUTDOWN, Pool
from tests.ledger_helpers import ADVANCE, add_job, attempts, claim_one, job, scalar, wait_for


def _owned(row: dict) -> tuple[int, int, str]:
    return row["id"], row["generation"], str(row["lease_token"])


def _hand_back(db, rows: list[dict]) -> list[dict]:
    with transaction(db) as conn:
        return transitions.hand_back(conn, [_owned(r) for r in rows])


def test_a_handed_back_job_is_due_at_once_and_its_attempt_is_not_a_failure(db):
    j = add_job(db, "delay_wake", {})
    row = claim_one(db)
    assert job(db, j)["max_attempts"] == 5
    assert _hand_back(db, [row]) == [{"id": j, "status": "pending", "queue": ADVANCE}]
    jr = job(db, j)
    assert jr["status"] == "pending" and jr["error_code"] == WORKER_SHUTDOWN
    assert jr["last_error"] == "interrupted by worker shutdown"
    assert jr["lease_token"] is None and jr["attempt_id"] is None and jr["finished_at"] is None
    # due at once (no backoff), and the attempt is given back to the budget (attempts counts claims)
    assert scalar(db, "SELECT run_at <= now() FROM workflow_jobs WHERE id = :id", id=j)
    assert (jr["attempts"], jr["max_attempts"]) == (1, 6)
    (a,) = attempts(db, j)
    assert (a["attempt"], a["status"], a["error_code"]) == (1, "canceled", WORKER_SHUTDOWN)
    assert a["worker_id"] == "test-worker" and a["duration_ms"] >= 0
    # the next claim runs it again as attempt 2, with the whole failure budget still ahead
    again = claim_one(db)
    assert (again["id"], again["attempts"]) == (j, 2)


def test_an_open_side_effect_marker_makes_the_hand_back_an_unknown_outcome(db):
    j = add_job(db, "webhook_delivery", {})
    row = claim_one(db, "workflow-ledger-outbound")
    with transaction(db) as conn:
        assert transitions.set_effect_marker(
            conn, j, row["generation"], str(row["lease_token"]), {"url": "x"}
        )
    assert _hand_back(db, [row])[0]["status"] == "dead"
    jr = job(db, j)
    assert jr["error_code"] == EXTERNAL_OUTCOME_UNKNOWN and jr["effect_marker"] == {"url": "x"}
    assert jr["max_attempts"] == 10 and jr["finished_at"] is not None
    assert [(a["status"], a["error_code"]) for a in attempts(db, j)] == [("failed", EXTERNAL_OUTCOME_UNKNOWN)]


def test_a_stale_executor_hands_back_nothing(db):
    j = add_job(db, "delay_wake", {})
    row = claim_one(db)
    with transaction(db) as conn:  # an operator's cancel fenced the executor (generation + 1)
        transitions.cancel_job(conn, j, "skip")
    assert _hand_back(db, [row]) == []
    assert job(db, j)["status"] == "canceled"
    assert _hand_back(db, []) == []


def test_pool_stop_settles_what_finishes_in_the_grace_and_hands_back_the_rest(
    db, fast_settings, handler_registry, recorder
):
    release_quick = threading.Event()
    stuck_started = threading.Event()
    late = threading.Event()

    def handler(ctx):
        if ctx.payload["kind"] == "quick":
            release_quick.wait(20)
            return {"done": True}
        stuck_started.set()
        late.wait(30)  # ignores the abort signal, like a handler blocked in a call
        return {"late": True}

    handlers.register("delay_wake", handler, replace=True)
    quick = add_job(db, "delay_wake", {"kind": "quick"})
    stuck = add_job(db, "delay_wake", {"kind": "stuck"})
    pool = LedgerPool(
        Pool.ADVANCE, settings=replace(fast_settings, poll_seconds=0.05), engine=db, worker_id="p", slots=4
    )
    pool.start()
    try:
        wait_for(lambda: pool.slots_in_use == 2 and stuck_started.is_set())
        pool.stop_claiming()
        later = add_job(db, "delay_wake", {"kind": "quick"})  # due, but a stopping pool claims nothing
        threading.Timer(0.3, release_quick.set).start()  # finishes inside the grace
        pool.stop(timeout=2)
    finally:
        release_quick.set()
    assert not pool.alive
    assert job(db, quick)["status"] == "succeeded"
    assert job(db, later)["status"] == "pending" and job(db, later)["attempts"] == 0
    jr = job(db, stuck)
    assert (jr["status"], jr["error_code"], jr["attempts"], jr["max_attempts"]) == (
        "pending",
        WORKER_SHUTDOWN,
        1,
        6,
    )
    assert ADVANCE in recorder.sent  # another worker is told at once
    late.set()  # the handed-back handler returns after all: its settlement is not sent
    wait_for(lambda: all(not t.is_alive() for t in pool._threads))
    assert job(db, stuck)["status"] == "pending"
    assert pool.stats.stale_settlements == 0
    assert scalar(db, "SELECT count(*) FROM workflow_job_executions WHERE status = 'failed'") == 0
