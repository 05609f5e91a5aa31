"""Fencing (L-CLAIM-5, L-STATE-4): once the generation moved on or another worker took over an
expired lease, every write of the old executor — settle, lease renewal, effect receipt, side-effect
marker — changes nothing."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from sqlalchemy import text

from app.db import transaction
from app.ledger import handlers, transitions
from app.ledger.drain import drain
from app.ledger.outcome import JobAborted
from app.ledger.pool import LedgerPool
from app.ledger.states import Pool
from app.ledger.suspend import suspend_jobs
from tests.ledger_helpers import (
    add_job,
    attempts,
    claim_one,
    context_for,
    job,
    scalar,
    settle,
    settlement,
    wait_for,
)

INSTANCE = "a" * 32


@pytest.fixture
def effects_table(db):
    with transaction(db) as conn:
        conn.execute(
            text("CREATE TABLE IF NOT EXISTS fence_effects (id serial PRIMARY KEY, who text NOT NULL)")
        )
        conn.execute(text("TRUNCATE fence_effects"))
    yield "fence_effects"
    with transaction(db) as conn:  # keep the schema equal to the models (tests/db/test_schema.py)
        conn.execute(text("DROP TABLE fence_effects"))


def _snapshot(engine, job_id):
    with engine.connect() as conn:
        j = dict(
            conn.execute(text("SELECT * FROM workflow_jobs WHERE id = :id"), {"id": job_id}).one()._mapping
        )
        effects = conn.execute(text("SELECT count(*) FROM workflow_job_effects")).scalar()
        rows = conn.execute(text("SELECT count(*) FROM fence_effects")).scalar()
    return j, attempts(engine, job_id), effects, rows


def _assert_stale_writes_change_nothing(engine, row):
    """Try every executor write with ``row``'s (generation, lease token); none may change anything."""
    ctx = context_for(row, engine)
    before = _snapshot(engine, row["id"])
    owned = (row["id"], row["generation"], str(row["lease_token"]))

    assert settle(engine, [settlement(row, "succeeded", result={"stale": True})]) == {}
    assert settle(engine, [settlement(row, "retry", error="stale")]) == {}
    with transaction(engine) as conn:
        assert transitions.renew_leases(conn, [owned], lease_seconds=60) == set()
    with transaction(engine) as conn:
        assert transitions.set_effect_marker(conn, *owned, {"method": "POST"}) is False
    called = []

    def write(conn):
        called.append(True)
        conn.execute(text("INSERT INTO fence_effects (who) VALUES ('stale')"))
        return {"stale": True}

    with pytest.raises(JobAborted):
        ctx.effect("fenced-step", write)
    assert called == [] and ctx.aborted
    assert _snapshot(engine, row["id"]) == before


def _insert(who):
    def write(conn):
        conn.execute(text("INSERT INTO fence_effects (who) VALUES (:w)"), {"w": who})
        return who

    return write


def _running_job(engine, **kw):
    job_id = add_job(engine, "delay_wake", {"n": 1}, instance_id=INSTANCE, **kw)
    return job_id, claim_one(engine)


def test_after_cancel_the_old_executor_writes_nothing(db, effects_table):
    j, row = _running_job(db)
    with transaction(db) as conn:
        assert transitions.cancel_job(conn, j, "operator skip")["generation"] == 2
    assert job(db, j)["status"] == "canceled"
    assert attempts(db, j)[0]["status"] == "canceled"
    _assert_stale_writes_change_nothing(db, row)


def test_after_suspend_the_old_executor_writes_nothing(db, effects_table):
    j, row = _running_job(db)
    with transaction(db) as conn:
        suspend_jobs(conn, INSTANCE)
    jr = job(db, j)
    assert (jr["status"], jr["generation"], jr["remaining_ms"]) == ("paused", 2, 0)
    _assert_stale_writes_change_nothing(db, row)


def test_after_manual_retry_and_a_new_claim_only_the_new_executor_writes(db, effects_table):
    j, old = _running_job(db)
    with transaction(db) as conn:
        transitions.cancel_job(conn, j, "operator skip")
    with transaction(db) as conn:
        retried = transitions.retry_job(conn, j)
    assert retried["generation"] == 3
    new = claim_one(db)
    assert (new["generation"], new["attempts"]) == (3, 1)  # attempts reset by the manual retry
    _assert_stale_writes_change_nothing(db, old)
    # the new executor's writes all work
    ctx = context_for(new, db)
    assert ctx.effect("step", _insert("new")) == "new"
    assert settle(db, [settlement(new, "succeeded", result={"new": True})]) == {j: "succeeded"}
    assert [(a["generation"], a["attempt"], a["status"]) for a in attempts(db, j)] == [
        (1, 1, "canceled"),
        (3, 1, "succeeded"),
    ]
    assert scalar(db, "SELECT count(*) FROM fence_effects") == 1
    assert scalar(db, "SELECT generation FROM workflow_job_effects") == 3


def test_after_a_lease_takeover_the_old_executor_writes_nothing(db, effects_table, settings):
    j = add_job(db, "delay_wake", {})
    old = claim_one(db, lease_seconds=0.2)
    wait_for(lambda: scalar(db, "SELECT lease_until <= now() FROM workflow_jobs WHERE id = :id", id=j))
    report = drain(db, replace(settings, backoff_base_seconds=0.0))
    assert report.ran and [(r["id"], r["status"]) for r in report.reclaimed] == [(j, "pending")]
    new = claim_one(db)
    assert new["generation"] == old["generation"] and new["lease_token"] != old["lease_token"]
    _assert_stale_writes_change_nothing(db, old)
    assert [(a["attempt"], a["status"], a["error_code"]) for a in attempts(db, j)] == [
        (1, "failed", "LEASE_EXPIRED"),
        (2, "running", None),
    ]
    assert settle(db, [settlement(new, "succeeded")]) == {j: "succeeded"}


def test_a_stalled_handler_loses_its_job_to_a_second_pool(db, effects_table, fast_settings, handler_registry):
    """Real threads: pool A's handler hangs mid-job without renewing its lease; the drain reclaims
    the job and pool B runs it to success; when A wakes up, its receipt write and its settlement
    change nothing and B's result stands."""
    a_started, a_release, a_done = threading.Event(), threading.Event(), threading.Event()
    a_error: list[BaseException] = []

    def handler(ctx):
        if ctx.attempt == 1:  # pool A's execution
            a_started.set()
            a_release.wait(20)
            try:
                ctx.effect("late-step", _insert("A"))
            except BaseException as exc:
                a_error.append(exc)
                raise
            finally:
                a_done.set()
            return {"by": "A"}
        ctx.effect("step", _insert("B"))
        return {"by": "B"}

    handlers.register("delay_wake", handler, replace=True)
    j = add_job(db, "delay_wake", {})
    # A: a 0.5 s lease it never renews (renewal far away: a stalled process)
    settings_a = replace(fast_settings, lease_seconds=0.5, renew_seconds=300, backoff_base_seconds=0.0)
    settings_b = replace(fast_settings, poll_seconds=0.05)
    pool_a = LedgerPool(Pool.ADVANCE, settings=settings_a, engine=db, worker_id="A", slots=1)
    pool_b = LedgerPool(Pool.ADVANCE, settings=settings_b, engine=db, worker_id="B", slots=1)
    pool_a.start()
    try:
        assert a_started.wait(10)
        wait_for(lambda: scalar(db, "SELECT lease_until <= now() FROM workflow_jobs WHERE id = :id", id=j))
        report = drain(db, settings_a)
        assert [r["status"] for r in report.reclaimed] == ["pending"]
        pool_b.start()
        wait_for(lambda: job(db, j)["status"] == "succeeded")
        a_release.set()
        assert a_done.wait(10)
        wait_for(lambda: pool_a.stats.stale_settlements == 1)
    finally:
        a_release.set()
        pool_a.stop(timeout=5)
        pool_b.stop(timeout=5)
    assert isinstance(a_error[0], JobAborted)
    jr = job(db, j)
    assert jr["status"] == "succeeded" and jr["result"] == {"by": "B"}
    with db.connect() as conn:
        assert [r.who for r in conn.execute(text("SELECT who FROM fence_effects"))] == ["B"]
        assert [r.step_key for r in conn.execute(text("SELECT step_key FROM workflow_job_effects"))] == [
            "step"
        ]
    rows = attempts(db, j)
    assert [(a["attempt"], a["worker_id"], a["status"]) for a in rows] == [
        (1, "A", "failed"),
        (2, "B", "succeeded"),
    ]
    assert rows[0]["error_code"] == "LEASE_EXPIRED"  # A's late settlement did not rewrite it


def test_a_lease_renewal_fires_the_abort_signal_of_a_fenced_execution(db, fast_settings, handler_registry):
    """The renewer notices lost ownership (here: an operator cancel) and aborts the handler."""
    seen: list[str] = []
    started = threading.Event()

    def handler(ctx):
        started.set()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10:
            ctx.sleep(0.05)  # raises JobAborted once aborted
        seen.append("not aborted")

    handlers.register("delay_wake", handler, replace=True)
    j = add_job(db, "delay_wake", {})
    pool = LedgerPool(
        Pool.ADVANCE, settings=replace(fast_settings, renew_seconds=0.2), engine=db, worker_id="p"
    )
    pool.start()
    try:
        assert started.wait(10)
        with transaction(db) as conn:
            transitions.cancel_job(conn, j, "operator skip")
        wait_for(lambda: pool.stats.stale_settlements == 1, timeout=5)
    finally:
        pool.stop(timeout=5)
    assert seen == []
    jr = job(db, j)
    assert jr["status"] == "canceled" and jr["error_code"] == "CANCELED"
    assert [a["status"] for a in attempts(db, j)] == ["canceled"]
