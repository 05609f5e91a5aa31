"""The drain (L-PAUSE-5): reclaims expired leases and passed deadlines through guarded transitions,
never runs handlers, one runner at a time, re-publishes hints for due queues."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from sqlalchemy import text

from app.db import transaction
from app.ledger import drain as drain_module
from app.ledger import handlers, transitions
from app.ledger.drain import DRAIN_LOCK_KEY, Paced, drain
from tests.ledger_helpers import (
    ADVANCE,
    OUTBOUND,
    add_job,
    attempts,
    claim,
    claim_one,
    job,
    scalar,
    wait_for,
)


def _expire(engine, job_id):
    """Let the lease run out (database time) without waiting for it."""
    with transaction(engine) as conn:
        conn.execute(
            text("UPDATE workflow_jobs SET lease_until = now() - interval '1 millisecond' WHERE id = :id"),
            {"id": job_id},
        )


def test_expired_lease_goes_back_to_pending_due_at_once(db, settings, recorder):
    """A lost lease is not the handler's failure: the job is due again at once (it waited
    for a 30 s backoff before), and the lost attempt still counts."""
    j = add_job(db, "delay_wake", {}, max_attempts=3)
    claim_one(db, lease_seconds=0.2)
    wait_for(lambda: scalar(db, "SELECT lease_until <= now() FROM workflow_jobs WHERE id = :id", id=j))
    recorder.sent.clear()
    report = drain(db, replace(settings, backoff_base_seconds=30))
    assert report.ran and (report.to_pending, report.to_dead) == (1, 0)
    jr = job(db, j)
    assert (jr["status"], jr["error_code"], jr["lease_token"]) == ("pending", "LEASE_EXPIRED", None)
    assert jr["run_at"] == jr["updated_at"] and jr["attempts"] == 1  # no backoff; the attempt counts
    (a,) = attempts(db, j)
    assert (a["status"], a["error_code"]) == ("failed", "LEASE_EXPIRED")
    assert a["finished_at"] is not None and a["duration_ms"] >= 200
    assert report.hinted_queues == ["workflow-ledger"] and recorder.sent  # due now: hinted


def test_exhausted_attempts_and_open_markers_go_dead(db, settings):
    exhausted = add_job(db, "delay_wake", {"n": 1}, max_attempts=1)
    marked = add_job(db, "delay_wake", {"n": 2}, max_attempts=5)
    rows = {r["id"]: r for r in claim(db, limit=2)}
    m = rows[marked]
    with transaction(db) as conn:
        assert transitions.set_effect_marker(
            conn, marked, m["generation"], str(m["lease_token"]), {"url": "x"}
        )
    _expire(db, exhausted)
    _expire(db, marked)
    report = drain(db, settings)
    got = {r["id"]: (r["status"], r["error_code"]) for r in report.reclaimed}
    assert got == {exhausted: ("dead", "LEASE_EXPIRED"), marked: ("dead", "EXTERNAL_OUTCOME_UNKNOWN")}
    assert job(db, marked)["effect_marker"] == {"url": "x"}
    assert "outcome needs confirmation" in job(db, marked)["last_error"]
    assert all(job(db, i)["finished_at"] is not None for i in got)
    assert [a["error_code"] for a in attempts(db, marked)] == ["EXTERNAL_OUTCOME_UNKNOWN"]


def test_a_passed_deadline_is_reclaimed_even_with_a_live_lease(db, settings):
    j = add_job(db, "delay_wake", {}, execution_timeout_ms=200)
    claim_one(db, lease_seconds=60)
    # the lease is capped at the deadline; make the lease look fresh to isolate the deadline rule
    wait_for(lambda: scalar(db, "SELECT execution_deadline <= now() FROM workflow_jobs WHERE id = :id", id=j))
    with transaction(db) as conn:
        conn.execute(
            text("UPDATE workflow_jobs SET lease_until = now() + interval '1 minute' WHERE id = :id"),
            {"id": j},
        )
    report = drain(db, replace(settings, backoff_base_seconds=0))
    assert [(r["id"], r["status"], r["error_code"]) for r in report.reclaimed] == [
        (j, "pending", "DEADLINE_EXCEEDED")
    ]
    assert attempts(db, j)[0]["error_code"] == "DEADLINE_EXCEEDED"


def test_healthy_running_and_pending_jobs_are_left_alone_and_no_handler_runs(db, settings, handler_registry):
    calls = []
    handlers.register("delay_wake", lambda ctx: calls.append(ctx.job_id), replace=True)
    running = add_job(db, "delay_wake", {"n": 1})
    claim_one(db)
    due = add_job(db, "delay_wake", {"n": 2})
    later = add_job(db, "delay_wake", {"n": 3}, delay_ms=60_000)
    report = drain(db, settings)
    assert report.ran and report.reclaimed == []
    assert calls == []
    assert [job(db, i)["status"] for i in (running, due, later)] == ["running", "pending", "pending"]
    assert [len(attempts(db, i)) for i in (running, due, later)] == [1, 0, 0]


def test_republishes_hints_for_queues_with_due_jobs(db, settings, recorder):
    add_job(db, "webhook_delivery", {})  # due now
    add_job(db, "delay_wake", {}, delay_ms=60_000)  # not due
    recorder.sent.clear()
    report = drain(db, settings)
    assert report.hinted_queues == [OUTBOUND] and recorder.sent == [OUTBOUND]
    # a reclaimed job that is due again (zero backoff) gets its queue hinted as well
    j = add_job(db, "delay_wake", {"n": 2})
    claim_one(db)
    _expire(db, j)
    recorder.sent.clear()
    report = drain(db, replace(settings, backoff_base_seconds=0))
    assert sorted(report.hinted_queues) == [ADVANCE, OUTBOUND] and sorted(recorder.sent) == [
        ADVANCE,
        OUTBOUND,
    ]


def test_only_one_runner_at_a_time(db, settings):
    j = add_job(db, "delay_wake", {})
    claim_one(db)
    _expire(db, j)
    holding, release = threading.Event(), threading.Event()

    def other_runner():
        with db.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": DRAIN_LOCK_KEY})
            holding.set()
            release.wait(10)
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": DRAIN_LOCK_KEY})
            conn.commit()

    t = threading.Thread(target=other_runner)
    t.start()
    try:
        assert holding.wait(10)
        skipped = drain(db, settings)
        assert skipped.ran is False and skipped.reclaimed == []
        assert job(db, j)["status"] == "running"
    finally:
        release.set()
        t.join(10)
    report = drain(db, settings)
    assert report.ran and [r["id"] for r in report.reclaimed] == [j]


def test_concurrent_drains_reclaim_each_job_once(db, settings, engine):
    ids = [add_job(db, "delay_wake", {"n": i}) for i in range(30)]
    claim(db, limit=30)
    with transaction(db) as conn:
        conn.execute(text("UPDATE workflow_jobs SET lease_until = now() - interval '1 second'"))
    small = replace(settings, drain_batch=4, backoff_base_seconds=0)
    reports = []
    barrier = threading.Barrier(3)

    def run():
        barrier.wait(10)
        for _ in range(3):
            reports.append(drain(engine, small, max_passes=20))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    reclaimed = [r["id"] for rep in reports for r in rep.reclaimed]
    assert sorted(reclaimed) == ids  # every job exactly once, in batches of at most 4
    assert all(len(attempts(db, i)) == 1 and attempts(db, i)[0]["status"] == "failed" for i in ids)
    assert scalar(db, "SELECT count(*) FROM workflow_jobs WHERE status = 'pending'") == 30


def test_a_run_that_holds_the_drain_waits_for_another_runs_look_at_it(db, settings, engine, monkeypatch):
    """Regression (CI, test_concurrent_drains_reclaim_each_job_once): a run holding the lease tried the
    advisory lock at each transaction, so another run's transaction holding the lock at that moment (its
    look at the lease) ended the holder's run after one batch, its expired leases left to a later run. A run
    that took the lease now waits for the lock."""
    ids = [add_job(db, "delay_wake", {"n": i}) for i in range(12)]
    claim(db, limit=12)
    with transaction(db) as conn:
        conn.execute(text("UPDATE workflow_jobs SET lease_until = now() - interval '1 second'"))
    waiting = f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {DRAIN_LOCK_KEY} AND NOT granted"
    looks: list[threading.Thread] = []

    def another_runs_look():
        """Another run's transaction on the lock: queued behind the holder's first one, so it has the lock
        when that commits; held until the holder waits for it (or ended its run)."""
        with transaction(engine) as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": DRAIN_LOCK_KEY})
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and holder.is_alive() and not scalar(db, waiting):
                time.sleep(0.01)

    real = transitions.reclaim_expired

    def reclaim_expired(conn, **kw):
        batch = real(conn, **kw)
        if not looks and threading.current_thread() is holder:  # in the holder's first transaction
            looks.append(threading.Thread(target=another_runs_look))
            looks[0].start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not scalar(db, waiting):
                time.sleep(0.01)
        return batch

    monkeypatch.setattr(drain_module.transitions, "reclaim_expired", reclaim_expired)
    reports = []
    holder = threading.Thread(target=lambda: reports.append(drain(engine, replace(settings, drain_batch=4))))
    holder.start()
    holder.join(30)
    looks[0].join(10)
    assert sorted(r["id"] for r in reports[0].reclaimed) == ids  # the holder went on: every batch, once


def test_the_drain_prunes_expired_idempotency_receipts(db, settings):
    """Regression: ``idempotency.prune`` existed and was never called; replays never expired."""
    with transaction(db) as conn:
        conn.execute(text("DELETE FROM idempotency_receipts"))
        conn.execute(
            text(
                "INSERT INTO idempotency_receipts (scope, route, key, fingerprint, created_at) VALUES "
                "('ns', 'POST /x', 'old', 'f', now() - interval '25 hours'), ('ns', 'POST /x', 'new', 'f', now())"
            )
        )
    report = drain(db, settings)
    assert report.swept["idempotency_receipts"] == 1
    with db.connect() as conn:
        keys = conn.execute(text("SELECT key FROM idempotency_receipts")).scalars().all()
    assert keys == ["new"]


def test_a_paced_sweep_pauses_after_each_batch_that_removed_rows(db, settings, monkeypatch):
    """Retention's row deletes are ``Paced``: after each batch that removed rows the drain waits ``factor``
    times as long as the batch's transaction took, outside it (no lock, no snapshot held); a plain sweep and
    a batch that removed nothing are not followed by a pause."""
    slept: list[float] = []
    monkeypatch.setattr(drain_module.time, "sleep", slept.append)
    batches = iter([4, 4, 1])
    in_transaction: list[bool] = []
    commits: list[str] = []

    def removes(conn, limit):
        in_transaction.append(conn.in_transaction())
        commits.append(conn.execute(text("SHOW synchronous_commit")).scalar())
        return next(batches)

    def plain(conn, limit):
        commits.append(conn.execute(text("SHOW synchronous_commit")).scalar())
        return 0

    small = replace(settings, drain_batch=4)
    report = drain(
        db,
        small,
        sweeps=[("plain", plain), ("paced", Paced(removes, 2.0))],
    )
    assert report.swept["paced"] == 9 and in_transaction == [True, True, True]
    # a paced batch commits without waiting for its WAL flush (lost in a crash, it is removed again)
    assert commits == ["on", "off", "off", "off"]
    assert len(slept) == 3 and all(s > 0 for s in slept)
    report = drain(db, small, sweeps=[("paced", Paced(lambda conn, limit: 0, 2.0))])
    assert report.swept["paced"] == 0 and len(slept) == 3  # nothing removed: no pause
    drain(db, small, sweeps=[("paced", Paced(lambda conn, limit: 4, 0.0))])
    assert len(slept) == 3  # LEDGERFLOW_RETENTION_PAUSE=0: none either


class _PausedRun:
    """Run A: a drain whose paced sweep removes a full batch, then pauses, and stays in that pause (outside
    any transaction, holding the drain's lease) until ``resume()``; its next batch removes nothing."""

    def __init__(self, db, settings, monkeypatch) -> None:
        self.paused, self.resumed = threading.Event(), threading.Event()
        self.batches: list[int] = []
        self.report = None
        small = replace(settings, drain_batch=5)
        real_sleep = time.sleep

        def sleep(seconds: float) -> None:
            if threading.current_thread() is self.thread:
                self.paused.set()
                self.resumed.wait(10)
            else:
                real_sleep(seconds)

        def removes(conn, limit):
            self.batches.append(limit if not self.batches else 0)
            return self.batches[-1]

        monkeypatch.setattr(drain_module.time, "sleep", sleep)
        # A's lease outlives any stall of a busy machine between A's pause and what the test does meanwhile
        monkeypatch.setattr(drain_module, "RUN_LEASE_SECONDS", 3600.0)
        self.thread = threading.Thread(
            target=lambda: setattr(self, "report", drain(db, small, sweeps=[("paced", Paced(removes, 1.0))]))
        )
        self.thread.start()
        assert self.paused.wait(10)

    def resume(self):
        self.resumed.set()
        self.thread.join(10)
        return self.report


def test_a_run_keeps_the_drain_through_its_pauses(db, settings, monkeypatch):
    """Regression: the drain's lock was taken per transaction, so a run started while another one paused
    between its retention batches (a pause can outlast the drain interval) ran beside it: their batches
    interleaved, and the removal took twice the share of the server the pause promises. The run's lease
    keeps the second one out until the first has ended, and then it runs."""
    a = _PausedRun(db, settings, monkeypatch)
    called: list[int] = []
    try:
        b = drain(db, settings, sweeps=[("paced", Paced(lambda conn, limit: called.append(limit) or 0, 1.0))])
    finally:
        ra = a.resume()
    assert b.ran is False and called == []
    assert ra.ran and ra.swept == {"paced": 5, "idempotency_receipts": 0} and a.batches == [5, 0]
    c = drain(db, settings)  # A released the lease at its end: the next run need not wait for it to expire
    assert c.ran
    assert scalar(db, "SELECT expires_at <= now() FROM ledger_run_leases WHERE name = 'drain'")


def test_a_dead_runners_lease_keeps_others_out_until_it_expires(db, settings):
    """A runner killed mid-run (SIGKILL in a pause) cannot release its lease: the next runs skip until it
    expires (``RUN_LEASE_SECONDS``), then one takes it."""
    with transaction(db) as conn:
        conn.execute(
            text(
                "INSERT INTO ledger_run_leases (name, holder, expires_at) "
                "VALUES ('drain', 'a-killed-runner', now() + interval '1 hour')"
            )
        )
    assert drain(db, settings).ran is False
    with transaction(db) as conn:
        conn.execute(text("UPDATE ledger_run_leases SET expires_at = now() - interval '1 millisecond'"))
    assert drain(db, settings).ran
    assert scalar(db, "SELECT holder <> 'a-killed-runner' FROM ledger_run_leases WHERE name = 'drain'")


def test_a_run_whose_lease_was_taken_over_stops(db, settings, monkeypatch):
    """A run that paused past its lease (a batch and its pause longer than ``RUN_LEASE_SECONDS`` with no
    renewal) and whose lease another run took meanwhile stops at its next transaction: it never runs a
    batch beside the new holder, and it leaves the new holder's lease alone."""
    a = _PausedRun(db, settings, monkeypatch)
    with transaction(db) as conn:
        conn.execute(
            text(
                "UPDATE ledger_run_leases SET holder = 'another-run', expires_at = now() + interval '1 hour'"
            )
        )
    ra = a.resume()
    assert ra.ran and a.batches == [5] and ra.swept == {"paced": 5}  # no second batch, no further sweep
    assert scalar(db, "SELECT holder = 'another-run' AND expires_at > now() FROM ledger_run_leases")
