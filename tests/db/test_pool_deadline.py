"""Execution deadline (L-CLAIM-5, L-CLAIM table): the handler is aborted when it passes, the
attempt settles as a retry with DEADLINE_EXCEEDED, and lease renewal never extends past it."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from sqlalchemy import text

from app.db import transaction
from app.ledger import handlers, transitions
from app.ledger.outcome import JobAborted
from app.ledger.pool import LedgerPool
from app.ledger.states import Pool
from tests.ledger_helpers import (
    add_job,
    attempts,
    claim_one,
    context_for,
    job,
    scalar,
    status_attempts,
    wait_for,
)


@pytest.fixture
def pool_factory(db, fast_settings, handler_registry):
    pools = []

    def make(**kw):
        settings = replace(fast_settings, **kw)
        p = LedgerPool(Pool.ADVANCE, settings=settings, engine=db, worker_id="deadline")
        p.start()
        pools.append(p)
        return p

    yield make
    for p in pools:
        p.stop(timeout=5)


@pytest.mark.parametrize("style", ["sleep", "check"])
def test_a_handler_past_its_deadline_is_aborted_and_retried(db, pool_factory, style):
    loops = []

    def handler(ctx):
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            loops.append(1)
            if style == "sleep":
                ctx.sleep(0.05)
            else:
                time.sleep(0.01)
                ctx.check()
        return "never"

    handlers.register("delay_wake", handler, replace=True)
    j = add_job(db, "delay_wake", {}, execution_timeout_ms=700, max_attempts=3)
    t0 = time.monotonic()
    pool_factory(backoff_base_seconds=60)
    wait_for(lambda: status_attempts(db, j) == ("pending", 1), timeout=10)
    elapsed = time.monotonic() - t0
    jr = job(db, j)
    assert 0.6 < elapsed < 5
    assert (jr["error_code"], jr["lease_token"]) == ("DEADLINE_EXCEEDED", None)
    assert "JobAborted" in jr["last_error"]
    (a,) = attempts(db, j)
    assert (a["status"], a["error_code"]) == ("failed", "DEADLINE_EXCEEDED")
    assert 600 <= a["duration_ms"] < 5000
    assert len(loops) > 3


def test_lease_renewal_stops_at_the_deadline(db, pool_factory):
    """While a job runs, the renewer keeps the lease alive but never past the execution deadline."""
    seen = []
    stop = threading.Event()

    def handler(ctx):
        while not stop.is_set():
            ctx.sleep(0.05)

    handlers.register("delay_wake", handler, replace=True)
    j = add_job(db, "delay_wake", {}, execution_timeout_ms=2500)
    pool_factory(lease_seconds=1.0, renew_seconds=0.2, backoff_base_seconds=60)
    wait_for(lambda: job(db, j)["status"] == "running")
    try:
        while job(db, j)["status"] == "running":
            with db.connect() as conn:
                seen.append(
                    conn.execute(
                        text(
                            "SELECT lease_until, execution_deadline, now() AS now FROM workflow_jobs "
                            "WHERE id = :id AND status = 'running'"
                        ),
                        {"id": j},
                    ).first()
                )
            time.sleep(0.05)
    finally:
        stop.set()
    seen = [s for s in seen if s is not None]
    assert all(s.lease_until <= s.execution_deadline for s in seen)
    # it was renewed (a 1 s lease lived ~2.5 s) and ended exactly at the deadline
    assert max(s.lease_until for s in seen) == seen[0].execution_deadline
    assert len({s.lease_until for s in seen}) >= 3
    assert job(db, j)["error_code"] == "DEADLINE_EXCEEDED"


def test_renew_leases_caps_at_and_refuses_after_the_deadline(db):
    short = add_job(db, "delay_wake", {"n": 1}, execution_timeout_ms=800)
    row = claim_one(db, lease_seconds=0.2)
    owned = [(short, row["generation"], str(row["lease_token"]))]
    with transaction(db) as conn:
        assert transitions.renew_leases(conn, owned, lease_seconds=60) == {short}
    jr = job(db, short)
    assert jr["lease_until"] == jr["execution_deadline"]  # 60 s asked, capped at the deadline
    wait_for(
        lambda: scalar(db, "SELECT execution_deadline <= now() FROM workflow_jobs WHERE id = :id", id=short)
    )
    with transaction(db) as conn:
        assert transitions.renew_leases(conn, owned, lease_seconds=60) == set()
    assert job(db, short)["lease_until"] == jr["lease_until"]


def test_executor_writes_are_refused_after_the_deadline(db):
    j = add_job(db, "delay_wake", {}, execution_timeout_ms=300)
    row = claim_one(db)
    ctx = context_for(row, db)
    wait_for(
        lambda: scalar(
            db, "SELECT execution_deadline <= clock_timestamp() FROM workflow_jobs WHERE id = :id", id=j
        )
    )
    with transaction(db) as conn:
        assert (
            transitions.set_effect_marker(conn, j, row["generation"], str(row["lease_token"]), {"m": 1})
            is False
        )
    # the context's own deadline timer fires by the worker's clock: on a busy machine a moment after the
    # database's clock passed the deadline
    wait_for(lambda: ctx.aborted)
    with pytest.raises(JobAborted):
        ctx.effect("step", lambda conn: 1)
    assert scalar(db, "SELECT count(*) FROM workflow_job_effects") == 0
    assert job(db, j)["effect_marker"] is None


def test_a_write_that_crosses_the_deadline_is_rolled_back(db):
    """The fenced transaction checks the deadline after the caller's writes, too."""
    j = add_job(db, "delay_wake", {}, execution_timeout_ms=400)
    row = claim_one(db)
    ctx = context_for(row, db)

    def slow_write(conn):
        conn.execute(text("SELECT pg_sleep(0.6)"))
        return {"late": True}

    with pytest.raises(JobAborted, match="deadline"):
        ctx.effect("step", slow_write)
    assert scalar(db, "SELECT count(*) FROM workflow_job_effects") == 0
    assert job(db, j)["status"] == "running"
