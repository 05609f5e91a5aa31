"""Claiming (L-CLAIM-1, -2, -6): order, every-fourth fairness, run_at, slots, attempt rows and
SKIP LOCKED under concurrent claimers."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace
from datetime import timedelta

import psycopg
from psycopg import sql as pg_sql
from sqlalchemy import text

from app.db import transaction
from app.ledger import handlers, hints, transitions
from app.ledger.enqueue import enqueue
from app.ledger.pool import LedgerPool
from app.ledger.states import Pool
from app.ledger.transitions import executor
from tests.ledger_helpers import (
    ADVANCE,
    OUTBOUND,
    add_job,
    attempts,
    claim,
    claim_one,
    job,
    scalar,
    settle,
    settlement,
    wait_for,
)


def _set_run_at(engine, job_id: int, seconds_ago: float) -> None:
    with transaction(engine) as conn:
        conn.execute(
            text("UPDATE workflow_jobs SET run_at = now() - make_interval(secs => :s) WHERE id = :id"),
            {"s": seconds_ago, "id": job_id},
        )


def test_claim_order_is_priority_then_run_at_then_id(db):
    ids = {}
    # (name, priority, seconds ago)
    for name, prio, ago in [
        ("p5_old", 5, 100),
        ("p0_new", 0, 1),
        ("p0_old", 0, 50),
        ("pneg", -3, 2),
        ("p0_new_b", 0, 1),
    ]:
        ids[name] = add_job(db, "delay_wake", {"name": name}, priority=prio)
        _set_run_at(db, ids[name], ago)
    # p0_new and p0_new_b share run_at: id decides
    with transaction(db) as conn:
        conn.execute(
            text(
                "UPDATE workflow_jobs SET run_at = (SELECT run_at FROM workflow_jobs WHERE id = :a) "
                "WHERE id = :b"
            ),
            {"a": ids["p0_new"], "b": ids["p0_new_b"]},
        )
    order = [claim_one(db)["payload"]["name"] for _ in range(5)]
    assert order == ["pneg", "p0_old", "p0_new", "p0_new_b", "p5_old"]
    assert claim(db) == []


def test_a_batch_claim_takes_the_first_rows_in_order(db):
    for prio in (3, 1, 2, 0):
        add_job(db, "delay_wake", {"prio": prio}, priority=prio, delay_ms=-1000)
    rows = claim(db, limit=3)
    assert [r["payload"]["prio"] for r in rows] == [0, 1, 2]


def test_claim_by_due_orders_by_earliest_run_at(db):
    urgent = [add_job(db, "delay_wake", {"n": i}, priority=-10) for i in range(3)]
    old_normal = add_job(db, "delay_wake", {"n": "old"}, priority=10)
    _set_run_at(db, old_normal, 3600)
    for j in urgent:
        _set_run_at(db, j, 1)
    assert claim_one(db, by_due=True)["id"] == old_normal
    assert claim_one(db, by_due=False)["id"] == urgent[0]


def test_every_fourth_claim_of_a_pool_is_by_due_time(db, settings):
    """Sustained high-priority traffic cannot starve a normal job: the pool's 4th, 8th, ... claim
    orders by earliest due time (L-CLAIM-2)."""
    normal = [add_job(db, "delay_wake", {"n": f"normal-{i}"}, priority=5) for i in range(2)]
    for i, j in enumerate(normal):
        _set_run_at(db, j, 600 - i)
    for i in range(20):
        j = add_job(db, "delay_wake", {"n": f"urgent-{i}"}, priority=-5)
        _set_run_at(db, j, 1)
    pool = LedgerPool(Pool.ADVANCE, settings=settings, engine=db, worker_id="fair", slots=1)  # not started
    picked = [pool._settle_and_claim([], 1)[0]["payload"]["n"] for _ in range(8)]
    assert picked[3] == "normal-0" and picked[7] == "normal-1"
    assert all(p.startswith("urgent") for i, p in enumerate(picked) if i not in (3, 7))
    assert pool.stats.claim_queries == 8 and pool.stats.claimed == 8


def test_not_claimable_before_run_at_by_database_time(db):
    later = add_job(db, "delay_wake", {}, delay_ms=60_000)
    assert claim(db) == []
    _set_run_at(db, later, 0.001)  # time passes (in the database)
    assert claim_one(db)["id"] == later


def test_claims_only_pending_jobs_of_the_asked_queue(db):
    adv = add_job(db, "delay_wake", {})
    out = add_job(db, "webhook_delivery", {})
    for status in ("failed", "dead", "canceled", "succeeded"):
        j = add_job(db, "delay_wake", {"s": status})
        with transaction(db) as conn:
            conn.execute(text("UPDATE workflow_jobs SET status = :s WHERE id = :id"), {"s": status, "id": j})
    assert claim(db, OUTBOUND, limit=0) == []
    assert [r["id"] for r in claim(db, OUTBOUND, limit=10)] == [out]
    assert [r["id"] for r in claim(db, ADVANCE, limit=10)] == [adv]


def test_each_claim_opens_one_attempt_row(db):
    j = add_job(db, "delay_wake", {"a": 1}, execution_timeout_ms=120_000, max_attempts=3)
    _set_run_at(db, j, 5)
    due = job(db, j)["run_at"]
    row = claim_one(db, lease_seconds=60, worker_id="w-1")
    now = row["db_now"]
    assert row["id"] == j and row["attempts"] == 1 and row["generation"] == 1
    jr = job(db, j)
    assert jr["status"] == "running" and str(jr["lease_token"]) == str(row["lease_token"])
    assert jr["lease_until"] == now + timedelta(seconds=60)
    assert jr["execution_deadline"] == now + timedelta(milliseconds=120_000)
    (a,) = attempts(db, j)
    assert (a["generation"], a["attempt"], a["status"]) == (1, 1, "running")
    assert a["started_at"] == now and a["due_at"] == due
    assert a["id"] == row["attempt_id"] and a["worker_id"] == "w-1"
    assert str(a["lease_token"]) == str(row["lease_token"]) and a["request"] == {"a": 1}
    assert a["finished_at"] is None

    # a retry and a second claim open a second attempt row in the same generation
    assert settle(db, [settlement(row, "retry", error="x")], base=0.0) == {j: "pending"}
    row2 = claim_one(db)
    rows = attempts(db, j)
    assert [(r["generation"], r["attempt"], r["status"]) for r in rows] == [
        (1, 1, "failed"),
        (1, 2, "running"),
    ]
    assert row2["attempts"] == 2 and str(row2["lease_token"]) != str(row["lease_token"])


def _written(engine, job_id: int) -> list[dict]:
    """The attempt rows actually stored (not the open attempt on the job row)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT * FROM workflow_job_executions WHERE job_id = :j ORDER BY attempt"), {"j": job_id}
        )
        return [dict(r._mapping) for r in rows]


def test_an_attempt_row_is_written_once_by_the_move_that_ends_it(db):
    """L-DATA-2: the claim writes no attempt row (the open attempt is on the job row); settle,
    reclaim, suspend and cancel each insert the final row from the open attempt's facts and clear
    them, so an attempt row is never updated."""
    j = add_job(db, "delay_wake", {"a": 1}, max_attempts=5, instance_id="inst-1")
    _set_run_at(db, j, 3)
    due = job(db, j)["run_at"]
    row = claim_one(db, worker_id="w-9")
    jr = job(db, j)
    assert _written(db, j) == []
    assert (jr["attempt_id"], jr["worker_id"], jr["attempt_started_at"]) == (
        row["attempt_id"],
        "w-9",
        row["db_now"],
    )
    assert settle(db, [settlement(row, "retry", error="again")], base=0.0) == {j: "pending"}
    (a,) = _written(db, j)
    assert (a["id"], a["attempt"], a["status"], a["worker_id"], a["error"]) == (
        row["attempt_id"],
        1,
        "failed",
        "w-9",
        "again",
    )
    assert a["due_at"] == due and a["started_at"] == row["db_now"] and a["request"] == {"a": 1}
    assert a["finished_at"] >= a["started_at"] and a["lease_token"] is None
    jr = job(db, j)
    assert (jr["attempt_id"], jr["worker_id"], jr["attempt_started_at"]) == (None, None, None)

    # reclaim of a lost lease writes the attempt as failed with the lease error
    claim_one(db, worker_id="w-lost", lease_seconds=0.01)
    time.sleep(0.05)
    with transaction(db) as conn:
        (moved,) = transitions.reclaim_expired(conn, limit=10, backoff_base=0, backoff_cap=0)
    assert moved["status"] == "pending"
    assert [(r["attempt"], r["status"], r["worker_id"], r["error_code"]) for r in _written(db, j)][-1] == (
        2,
        "failed",
        "w-lost",
        "LEASE_EXPIRED",
    )

    # a fencing move (suspend) of a running job closes its attempt as canceled
    claim_one(db, worker_id="w-3")
    with transaction(db) as conn:
        assert transitions.suspend_instance(conn, "inst-1", ["delay_wake"]) == [{"id": j, "status": "paused"}]
    last = _written(db, j)[-1]
    assert (last["attempt"], last["status"], last["worker_id"], last["error"]) == (
        3,
        "canceled",
        "w-3",
        "instance suspended",
    )
    # cancel of a paused job has no open attempt: nothing written
    with transaction(db) as conn:
        assert transitions.cancel_job(conn, j, "skip")["id"] == j
    assert len(_written(db, j)) == 3 and job(db, j)["attempt_id"] is None


def test_a_lease_never_outlives_a_short_execution_deadline(db):
    add_job(db, "delay_wake", {}, execution_timeout_ms=1500)
    row = claim_one(db, lease_seconds=60)
    jr = job(db, row["id"])
    assert jr["lease_until"] == jr["execution_deadline"] == row["db_now"] + timedelta(milliseconds=1500)


def test_pool_claims_only_as_many_jobs_as_free_slots(db, fast_settings, handler_registry):
    release = threading.Event()
    handlers.register("delay_wake", lambda ctx: release.wait(20), replace=True)
    ids = [add_job(db, "delay_wake", {"n": i}) for i in range(5)]
    pool = LedgerPool(
        Pool.ADVANCE, settings=replace(fast_settings, poll_seconds=0.05), engine=db, worker_id="p", slots=2
    )
    pool.start()
    try:
        wait_for(lambda: pool.slots_in_use == 2)
        time.sleep(0.3)  # several poll cycles pass with no free slot: no further claim
        with db.connect() as conn:
            counts = dict(
                conn.execute(text("SELECT status, count(*) FROM workflow_jobs GROUP BY status")).all()
            )
        assert counts == {"running": 2, "pending": 3}
        assert pool.stats.claimed == 2 and pool.stats.claim_queries == 1
        release.set()
        # slots are refilled as soon as jobs finish, until everything is done
        wait_for(lambda: scalar(db, "SELECT count(*) FROM workflow_jobs WHERE status = 'succeeded'") == 5)
    finally:
        release.set()
        pool.stop(timeout=5)
    assert scalar(db, "SELECT count(*) FROM workflow_job_executions") == len(ids)


def test_concurrent_claimers_never_claim_the_same_job_twice(db, engine):
    """Six threads, each on its own connection, claim and settle in batches (SKIP LOCKED)."""
    total = 400
    with transaction(db) as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id, run_at) "
                "SELECT 'delay_wake', 'workflow-ledger', 3, 'op-' || g, 't', now() - interval '1 second' "
                "FROM generate_series(1, :n) g"
            ),
            {"n": total},
        )
    claimed: list[list[int]] = [[] for _ in range(6)]
    max_running_seen: list[int] = []
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def claimer(i: int) -> None:
        try:
            start.wait(10)
            pending: list[transitions.Settlement] = []
            while True:
                with transaction(engine) as conn:
                    if pending:
                        transitions.settle(conn, pending, backoff_base=30, backoff_cap=900)
                    rows = transitions.claim(
                        conn, queue=ADVANCE, limit=5, worker_id=f"c{i}", lease_seconds=60, by_due=i % 2 == 0
                    )
                    # an attempt is open on its job row or final in the attempt table, never both
                    max_running_seen.append(
                        conn.execute(
                            text(
                                "SELECT count(*) FROM workflow_jobs j JOIN workflow_job_executions e "
                                "ON e.job_id = j.id AND e.generation = j.generation AND e.attempt = j.attempts "
                                "WHERE j.status = 'running'"
                            )
                        ).scalar()
                    )
                pending = [settlement(r, "succeeded") for r in rows]
                claimed[i].extend(r["id"] for r in rows)
                if not rows:
                    return
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    every = [j for c in claimed for j in c]
    assert len(every) == total and len(set(every)) == total
    assert sum(1 for c in claimed if c) >= 2, "the claimers did not actually overlap"
    assert max(max_running_seen) == 0  # never an attempt both open and written
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM workflow_job_executions")).scalar() == total
        assert (
            conn.execute(
                text(
                    "SELECT count(*) FROM (SELECT job_id FROM workflow_job_executions "
                    "GROUP BY job_id HAVING count(*) > 1) d"
                )
            ).scalar()
            == 0
        )
        assert (
            conn.execute(text("SELECT count(*) FROM workflow_jobs WHERE status = 'succeeded'")).scalar()
            == total
        )


def _raw(db):
    """A raw psycopg connection set up as the pool's (autocommit, forced generic plans)."""
    _, params = db.dialect.create_connect_args(db.url)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True, options=transitions.PG_SESSION_OPTIONS)


def test_the_pools_pass_reads_and_writes_the_enum_columns_as_text(db):
    """The pool's one-statement pass (settle + claim, a prepared statement) with the enum types of
    migration 0016: the queue parameter is read as the queue enum, the claimed rows' type and queue
    and the settled statuses come back as plain strings (an ``array_agg`` of an enum would come back as
    one unparsed string), and the attempt rows get their enum status."""
    ids = [add_job(db, "delay_wake", {"i": i}) for i in range(3)]
    with _raw(db) as pg:
        kw = {
            "queue": ADVANCE,
            "worker_id": "w-enum",
            "lease_seconds": 30,
            "by_due": False,
            "backoff_base": 30.0,
            "backoff_cap": 900.0,
        }
        settled, claimed, _ = transitions.settle_and_claim(pg, [], limit=3, **kw)
        assert settled == {} and sorted(r["id"] for r in claimed) == ids
        assert {(r["type"], r["queue"]) for r in claimed} == {("delay_wake", ADVANCE)}
        kinds = ["succeeded", "dead", "retry"]
        items = [
            settlement(r, k, error=None if k == "succeeded" else "boom")
            for r, k in zip(claimed, kinds, strict=True)
        ]
        settled, again, _ = transitions.settle_and_claim(pg, items, limit=0, **kw)
        types = pg.execute("SELECT parameter_types::text FROM pg_prepared_statements").fetchall()
    assert again == []
    by_kind = {k: settled[r["id"]] for r, k in zip(claimed, kinds, strict=True)}
    assert by_kind == {"succeeded": "succeeded", "dead": "dead", "retry": "pending"}
    assert any("workflow_job_queue" in t for (t,) in types), types
    rows = scalar(db, "SELECT string_agg(status::text, ',' ORDER BY job_id) FROM workflow_job_executions")
    assert rows == "succeeded,failed,failed"


def _numbered(sql: str) -> tuple[str, list[str]]:
    """A psycopg statement (``%(name)s``) with numbered parameters for PREPARE, and their names."""
    names: list[str] = []
    for name in re.findall(r"%\((\w+)\)s", sql):
        if name not in names:
            names.append(name)
    return re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", sql), names


def test_the_pools_claim_plans_read_the_claim_indexes_by_queue(db):
    """The claim's generic plan (the pool prepares it once) is a range scan of its partial claim
    index with the queue, an enum since migration 0016, as its index condition."""
    for i in range(200):
        add_job(db, "delay_wake" if i % 2 else "webhook_delivery", {"i": i})
    with transaction(db) as conn:
        conn.execute(text("ANALYZE workflow_jobs"))
    args = {"queue": ADVANCE, "worker_id": "w", "lease_seconds": 30}
    with _raw(db) as pg:
        for by_due, index in ((False, "ix_workflow_jobs_claim"), (True, "ix_workflow_jobs_claim_due")):
            sql, names = _numbered(executor._pg_claim_sql(by_due, 4))
            pg.execute(f"PREPARE lf_claim_{int(by_due)} AS {sql}")
            values = pg_sql.SQL(", ").join(pg_sql.Literal(args[n]) for n in names)
            explain = pg_sql.SQL("EXPLAIN EXECUTE {}({})").format(
                pg_sql.Identifier(f"lf_claim_{int(by_due)}"), values
            )
            plan = "\n".join(r[0] for r in pg.execute(explain))
            assert f"Index Scan using {index} on workflow_jobs" in plan, plan
            assert re.search(r"Index Cond: \(+queue = \$1\)", plan), plan


def test_a_pass_reports_when_the_queues_next_delayed_job_falls_due(db):
    """The pass answers the seconds until the earliest pending job of its queue that is not due
    yet (read in the pass's own snapshot); due jobs, other queues and paused jobs do not count."""
    with _raw(db) as pg:
        kw = {
            "queue": ADVANCE,
            "worker_id": "w-due",
            "lease_seconds": 30,
            "by_due": False,
            "backoff_base": 30.0,
            "backoff_cap": 900.0,
        }
        assert transitions.settle_and_claim(pg, [], limit=1, **kw).next_due_in is None
        add_job(db, "delay_wake", {"n": "now"})
        add_job(db, "webhook_delivery", {"n": "other queue, sooner"}, delay_ms=5000)
        later = add_job(db, "delay_wake", {"n": "later"}, delay_ms=600_000)
        add_job(db, "delay_wake", {"n": "sooner"}, delay_ms=40_000)
        done = transitions.settle_and_claim(pg, [], limit=1, **kw)
        assert [r["payload"]["n"] for r in done.claimed] == ["now"]
        assert 30 < done.next_due_in <= 40
        with transaction(db) as conn:  # a retry's backoff is a delayed job too: 30 s from its settlement
            conn.execute(text("DELETE FROM workflow_jobs WHERE payload->>'n' = 'sooner'"))
        retried = transitions.settle_and_claim(
            pg, [settlement(done.claimed[0], "retry", error="x")], limit=0, **kw
        )
        assert retried.settled == {done.claimed[0]["id"]: "pending"}
        assert 20 < retried.next_due_in <= 30
    assert job(db, later)["status"] == "pending"


def test_a_pool_starts_a_delayed_job_when_it_falls_due_not_at_the_next_poll(db, settings, handler_registry):
    """A pool that learned of a delayed job in a pass sleeps until its due time, however long
    the short poll is (here 60 s, and no Redis hint arrives: the pool is not subscribed to any)."""
    ran = threading.Event()
    handlers.register("delay_wake", lambda ctx: ran.set(), replace=True)
    pool = LedgerPool(
        Pool.ADVANCE, settings=replace(settings, poll_seconds=60.0), engine=db, worker_id="due", slots=1
    )
    add_job(db, "delay_wake", {"n": 1}, delay_ms=1000)
    pool.start()
    pool.nudge()  # the worker's first pass (actors.runtime nudges every pool it starts)
    try:
        assert ran.wait(30), "the delayed job did not start before the short poll"
    finally:
        pool.stop(timeout=5)


def test_a_job_enqueued_beyond_two_polls_without_a_hint_starts_when_due(
    db, fast_settings, handler_registry, recorder, monkeypatch
):
    """A job due beyond two short polls publishes no hint (hints.worth_a_hint): a running, idle pool
    finds it at its next poll pass, then sleeps until it falls due; it never starts early."""
    monkeypatch.setattr(hints, "get_settings", lambda: fast_settings)  # the horizon: 2 x 0.2 s
    ran = threading.Event()
    handlers.register("delay_wake", lambda ctx: ran.set(), replace=True)
    pool = LedgerPool(Pool.ADVANCE, settings=fast_settings, engine=db, worker_id="far", slots=1)
    pool.start()
    pool.nudge()
    try:
        with transaction(db) as conn:
            jid = enqueue(conn, "delay_wake", {"n": 1}, delay_ms=1000).id
        assert recorder.sent == []  # no hint: the pool's own passes find it
        assert ran.wait(30), "the job due beyond two polls never started"
    finally:
        pool.stop(timeout=5)
    early = scalar(
        db,
        "SELECT count(*) FROM workflow_job_executions e JOIN workflow_jobs j ON j.id = e.job_id "
        "WHERE j.id = :id AND e.started_at < j.run_at",
        id=jid,
    )
    assert early == 0
