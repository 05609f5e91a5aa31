"""Enqueue inside the caller's transaction, post-commit wake hints and idempotency keys
(L-CLAIM-4, L-EFFECT-2, L-STATE-2)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.exc import OperationalError

from app.db import _engine_for, transaction
from app.db_time import db_now
from app.ledger import hints
from app.ledger.enqueue import arm, enqueue, operation_key_for
from app.settings import get_settings
from tests.ledger_helpers import ADVANCE, OUTBOUND, add_job, install_recorder, job, scalar, wait_for


class Rollback(Exception):
    pass


def _count(engine, where: str = "true", **params) -> int:
    return scalar(engine, f"SELECT count(*) FROM workflow_jobs WHERE {where}", **params)


def test_enqueue_writes_a_pending_job_with_links_and_type_defaults(db):
    with transaction(db) as conn:
        a = enqueue(
            conn,
            "delay_wake",
            {"x": 1},
            instance_id="i" * 32,
            task_id="t1",
            step_key="cool",
            priority=3,
            trace_id="trace-1",
        )
        b = enqueue(conn, "webhook_delivery", {"y": 2}, idempotency_key="evt-1:sub-1")
    ja, jb = job(db, a.id), job(db, b.id)
    assert a.created and b.created
    assert (ja["type"], ja["queue"], ja["status"]) == ("delay_wake", ADVANCE, "pending")
    assert (jb["type"], jb["queue"]) == ("webhook_delivery", OUTBOUND)
    assert ja["payload"] == {"x": 1}
    assert (ja["instance_id"], ja["task_id"], ja["step_key"]) == ("i" * 32, "t1", "cool")
    assert ja["priority"] == 3 and ja["trace_id"] == "trace-1"
    # per-type attempt budgets set at enqueue time (L-STATE-2), default 10 min timeout
    assert (ja["max_attempts"], jb["max_attempts"]) == (5, 10)
    assert ja["execution_timeout_ms"] == 600_000
    assert (ja["attempts"], ja["generation"]) == (0, 1)
    assert jb["idempotency_key"] == "evt-1:sub-1"
    assert jb["trace_id"] and jb["trace_id"] != ja["trace_id"]
    # operation key: stable for the same input, different for a different payload
    assert ja["operation_key"] == operation_key_for("delay_wake", {"x": 1}, ("i" * 32, "t1", "cool"))
    assert operation_key_for("delay_wake", {"x": 1}) == operation_key_for("delay_wake", {"x": 1})
    assert operation_key_for("delay_wake", {"x": 1}) != operation_key_for("delay_wake", {"x": 2})


def test_run_at_and_delay_use_database_time(db):
    with transaction(db) as conn:
        now = db_now(conn)
        delayed = enqueue(conn, "delay_wake", {}, delay_ms=5000).id
        at = enqueue(conn, "delay_wake", {}, run_at=now + timedelta(minutes=3)).id
        explicit = enqueue(conn, "delay_wake", {}, max_attempts=2, execution_timeout_ms=1500).id
    assert job(db, delayed)["run_at"] == now + timedelta(seconds=5)
    assert job(db, at)["run_at"] == now + timedelta(minutes=3)
    assert (job(db, explicit)["max_attempts"], job(db, explicit)["execution_timeout_ms"]) == (2, 1500)


def test_invalid_priority_and_type_are_refused(db):
    with pytest.raises(ValueError), transaction(db) as conn:
        enqueue(conn, "delay_wake", {}, priority=40_000)
    with pytest.raises(ValueError), transaction(db) as conn:
        enqueue(conn, "no_such_type", {})
    assert _count(db) == 0


def test_hint_is_published_only_after_commit(db):
    seen_committed: list[int] = []

    def publisher(queue: str) -> None:
        # runs after commit: another connection already sees the job
        seen_committed.append(_count(db))
        rec(queue)

    rec = install_recorder()
    hints.set_publisher(publisher)
    try:
        with transaction(db) as conn:
            enqueue(conn, "delay_wake", {"n": 1})
            enqueue(conn, "task_timeout", {"n": 2})
            enqueue(conn, "event_dispatch", {"n": 3})
            assert rec.sent == [], "a hint went out before commit"
            assert _count(db) == 0, "the job is visible before commit"
        # one hint per queue per transaction, after the commit
        assert sorted(rec.sent) == [ADVANCE, OUTBOUND]
        assert seen_committed == [3, 3]
    finally:
        hints.set_publisher(None)


def _horizon_ms() -> float:
    """Two short polls: the delay from which a job needs no hint (hints.worth_a_hint)."""
    return 2_000 * get_settings().poll_seconds


def test_an_arm_publishes_its_hint_only_when_it_created_or_moved_the_job(db, recorder):
    """L-CLAIM-4 for ``arm`` (one pending job of a type per instance): the job it creates, or moves
    earlier, publishes its hint after the commit; an arm that leaves the job as it was publishes nothing
    (the engine's watch is re-armed for a later deadline at every step of a workflow: one hint message and
    one claim pass per step for nothing, before)."""
    iid = "arm-" + operation_key_for("x", "y")[:12]
    h = _horizon_ms()

    def arm_in_tx(delay_ms: float) -> list[str]:
        recorder.sent.clear()
        with transaction(db) as conn:
            arm(conn, "task_timeout", {}, instance_id=iid, delay_ms=delay_ms, trace_id="t")
            run_at = conn.execute(text("SELECT 1")).scalar()  # the arm rides with this statement
            assert run_at == 1 and recorder.sent == []  # read inside the transaction, sent after it
        return list(recorder.sent)

    assert arm_in_tx(h * 0.75) == [ADVANCE]  # created
    assert arm_in_tx(h * 0.9) == []  # due later than the job: left as it is
    assert arm_in_tx(h * 0.75) == []  # already about as early (moved only when due later)
    assert arm_in_tx(h * 0.25) == [ADVANCE]  # moved earlier
    assert _count(db, "instance_id = :i", i=iid) == 1
    # the arm sent at the commit's own flush (nothing after it in the transaction) publishes too
    recorder.sent.clear()
    with transaction(db) as conn:
        arm(conn, "task_timeout", {}, instance_id=iid, delay_ms=h * 0.1, trace_id="t")
    assert recorder.sent == [ADVANCE]
    # and a rollback publishes nothing, even for a job the arm moved
    recorder.sent.clear()
    with pytest.raises(Rollback), transaction(db) as conn:
        arm(conn, "task_timeout", {}, instance_id=iid, delay_ms=10, trace_id="t")
        conn.execute(text("SELECT 1"))
        raise Rollback
    assert recorder.sent == []


def test_a_job_due_beyond_two_short_polls_publishes_no_hint(db, recorder):
    """Every idle pool passes once per short poll and sleeps until the next due job it saw, so a job due
    beyond two polls starts on time without a hint (``hints.worth_a_hint``). The engine's watch (a
    deadline minutes away, armed at every start) sent a Dramatiq message and cost a claim pass per
    workflow before. Fails before: every created job published."""
    h = _horizon_ms()
    iid = "far-" + operation_key_for("far", "y")[:12]
    with transaction(db) as conn:
        arm(conn, "task_timeout", {}, instance_id=iid, delay_ms=h * 100, trace_id="t")  # created, far
        enqueue(conn, "delay_wake", {"n": "far"}, delay_ms=h + 1)
        enqueue(conn, "delay_wake", {"n": "later"}, delay_ms=h * 50, later=True)
    assert recorder.sent == []
    assert _count(db) == 3
    with transaction(db) as conn:  # moved earlier, still beyond the horizon: no hint either
        arm(conn, "task_timeout", {}, instance_id=iid, delay_ms=h * 10, trace_id="t")
    assert recorder.sent == []
    with transaction(db) as conn:  # moved within two polls: a hint
        arm(conn, "task_timeout", {}, instance_id=iid, delay_ms=h / 2, trace_id="t")
    assert recorder.sent == [ADVANCE]
    recorder.sent.clear()
    with transaction(db) as conn:  # due within the horizon, and a job with an absolute run_at: hints
        enqueue(conn, "webhook_delivery", {"n": "soon"}, delay_ms=h - 1)
        enqueue(conn, "delay_wake", {"n": "at"}, run_at=db_now(conn) + timedelta(hours=1))
    assert sorted(recorder.sent) == sorted([OUTBOUND, ADVANCE])


def test_rollback_publishes_nothing_and_discards_the_job(db, recorder):
    with pytest.raises(Rollback), transaction(db) as conn:
        conn.execute(text("SELECT 1"))
        enqueue(conn, "delay_wake", {"n": 1})
        raise Rollback
    assert recorder.sent == []
    assert _count(db) == 0


def test_a_rollback_does_not_mute_later_hints_on_the_same_connection(db, recorder):
    """Regression: the per-transaction set of hinted queues survived a rollback in the pooled
    connection's ``info``, so every later enqueue on that connection published nothing."""
    url = make_url(str(db.url.render_as_string(hide_password=False))).update_query_dict(
        {"application_name": "lf_hint_regression"}
    )
    engine = _engine_for(url.render_as_string(hide_password=False))  # a fresh pool: one connection
    try:
        with pytest.raises(Rollback), transaction(engine) as conn:
            enqueue(conn, "delay_wake", {"n": 1})
            raise Rollback
        assert recorder.sent == []
        with transaction(engine) as conn:
            enqueue(conn, "delay_wake", {"n": 2})
        assert recorder.sent == [ADVANCE]
        with transaction(engine) as conn:
            enqueue(conn, "event_dispatch", {"n": 3})
        assert recorder.sent == [ADVANCE, OUTBOUND]
    finally:
        engine.dispose()


def test_a_failing_publisher_never_undoes_the_committed_job(db):
    rec = install_recorder(fail=True)
    try:
        with transaction(db) as conn:
            created = enqueue(conn, "delay_wake", {"n": 1})
        assert rec.sent == [ADVANCE]  # it was tried, and raised
        assert job(db, created.id)["status"] == "pending"
        # later enqueues still commit (the breaker only skips publishing for a moment)
        add_job(db, "delay_wake", {"n": 2})
        assert _count(db) == 2
    finally:
        hints.set_publisher(None)
        hints._suspended_until = 0.0


def test_idempotency_key_returns_the_existing_job(db, recorder):
    first = add_job(db, "webhook_delivery", {"v": 1}, idempotency_key="k-1")
    with transaction(db) as conn:
        again = enqueue(conn, "webhook_delivery", {"v": 2}, idempotency_key="k-1")
    assert again.id == first and again.created is False
    assert _count(db, "idempotency_key = 'k-1'") == 1
    assert job(db, first)["payload"] == {"v": 1}
    assert recorder.sent == [OUTBOUND]  # the duplicate published no second hint
    # jobs without a key are never deduplicated
    add_job(db, "webhook_delivery", {"v": 1})
    add_job(db, "webhook_delivery", {"v": 1})
    assert _count(db) == 3


@pytest.mark.parametrize("first_outcome", ["rollback", "commit"])
def test_idempotent_enqueue_under_a_concurrent_first_inserter(db, recorder, first_outcome):
    """Two connections insert the same key; the first holds its transaction open. If it rolls back
    the second creates the job; if it commits the second gets the first's job. Always one row."""
    inserted = threading.Event()
    release = threading.Event()
    result: dict[str, object] = {}

    def first() -> None:
        try:
            with transaction(db) as conn:
                result["first"] = enqueue(conn, "webhook_delivery", {"who": "first"}, idempotency_key="dup")
                inserted.set()
                assert release.wait(10)
                if first_outcome == "rollback":
                    raise Rollback
        except Rollback:
            result["first_rolled_back"] = True

    def second() -> None:
        with transaction(db) as conn:
            result["second"] = enqueue(conn, "webhook_delivery", {"who": "second"}, idempotency_key="dup")

    t1 = threading.Thread(target=first)
    t1.start()
    assert inserted.wait(10)
    t2 = threading.Thread(target=second)
    t2.start()
    # the second insert waits on the first's uncommitted key (a row lock on the unique index)
    wait_for(
        lambda: (
            scalar(
                db,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO workflow_jobs%'",
            )
            == 1
        )
    )
    assert t2.is_alive()
    release.set()
    t1.join(10)
    t2.join(10)
    assert not t1.is_alive() and not t2.is_alive()

    with db.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM workflow_jobs"))]
    assert len(rows) == 1
    second_job = result["second"]
    if first_outcome == "rollback":
        assert result.get("first_rolled_back")
        assert second_job.created is True and rows[0]["id"] == second_job.id
        assert rows[0]["payload"] == {"who": "second"}
    else:
        assert second_job.created is False and second_job.id == result["first"].id
        assert rows[0]["payload"] == {"who": "first"}
    assert recorder.sent == [OUTBOUND]  # exactly one hint: from the transaction that created it


def test_a_connection_lost_inside_a_transaction_surfaces_as_the_database_error(db):
    """Regression (found by the fault suite): a backend terminated mid-transaction used to surface as
    PendingRollbackError (the cleanup touched the dead connection), which the API answered with 500
    instead of 503. The original OperationalError now reaches the caller."""
    with pytest.raises(OperationalError, match="terminating connection"), transaction(db) as conn:
        conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
