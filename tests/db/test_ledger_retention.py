"""Retention: the drain's sweeps remove finished history past its retention in small
batches, never touch live work, and never wait on a locked row."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from actors.maintenance import run_drain
from app.db import transaction
from app.ledger import retention, transitions
from app.ledger.drain import drain
from app.ledger.retention import RetentionPolicy
from tests.engine.helpers import publish, start
from tests.ledger_helpers import add_job, attempts, claim, scalar, settle, settlement

POLICY = RetentionPolicy(jobs_days=7, dead_days=30, audit_days=400, batch=1)


def _finished(db, status: str, days_ago: float, n: int = 1) -> list[int]:
    """``n`` jobs that ran one attempt and ended ``status`` ``days_ago`` days ago."""
    ids = [add_job(db, "delay_wake", {"i": i, "s": status, "d": days_ago}) for i in range(n)]
    rows = [r for r in claim(db, limit=len(ids)) if r["id"] in ids]
    kind = {"succeeded": "succeeded", "dead": "dead", "canceled": "canceled"}[status]
    if kind == "canceled":
        with transaction(db) as conn:
            for j in ids:
                transitions.cancel_job(conn, j, "operator skip")
    else:
        settle(db, [settlement(r, kind, error="x" if kind == "dead" else None) for r in rows])
    with transaction(db) as conn:
        conn.execute(
            text(
                "UPDATE workflow_jobs SET finished_at = now() - make_interval(days => :d) WHERE id = ANY(:ids)"
            ),
            {"ids": ids, "d": days_ago},
        )
    return ids


def _exists(db, job_id: int) -> bool:
    return bool(scalar(db, "SELECT count(*) FROM workflow_jobs WHERE id = :id", id=job_id))


def test_policy_from_env_and_bad_overrides(monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_RETENTION_DAYS", "3")
    monkeypatch.setenv("LEDGERFLOW_RETENTION_BY_NAMESPACE", "ns-a=30, ns-b=0.5")
    p = retention.policy_from_env()
    assert (p.jobs_days, p.dead_days, p.audit_days, p.by_namespace) == (3, 30, 400, {"ns-a": 30, "ns-b": 0.5})
    for bad in ("ns-a", "ns=-1", "ns=x", "=3", "ns=36501"):
        monkeypatch.setenv("LEDGERFLOW_RETENTION_BY_NAMESPACE", bad)
        with pytest.raises(
            ValueError, match=r"^LEDGERFLOW_RETENTION_BY_NAMESPACE: must be namespace_id=days"
        ):
            retention.policy_from_env()


def test_finished_jobs_and_attempts_go_after_their_retention_live_work_stays(db):
    old_ok = _finished(db, "succeeded", 8, n=3)
    old_canceled = _finished(db, "canceled", 8)
    young = _finished(db, "succeeded", 6)
    dead_recent = _finished(db, "dead", 8)
    dead_old = _finished(db, "dead", 31)
    pending = add_job(db, "delay_wake", {"live": "pending"})
    (running,) = [r["id"] for r in claim(db, limit=1)] or [None]
    assert running is not None
    with db.begin() as conn:  # one row per DELETE: every sweep removes what is due over several passes
        removed = [retention.prune_jobs(conn, 1, policy=POLICY) for _ in range(6)]
        removed_dead = [retention.prune_jobs(conn, 1, policy=POLICY, dead=True) for _ in range(3)]
    assert removed == [1, 1, 1, 1, 0, 0] and removed_dead == [1, 0, 0]
    # the attempts of a removed job are no job's any more; they go with their day's partition
    # (tests/db/test_history_partitions.py), not row by row with their job
    for j in old_ok + old_canceled + dead_old:
        assert not _exists(db, j)
    for j in young + dead_recent + [pending, running]:
        assert _exists(db, j)
    assert attempts(db, young[0]) != []


def test_orphaned_receipts_and_old_audit_go(db):
    sfx = uuid.uuid4().hex[:8]
    keep_ns, other_ns = f"ns-keep-{sfx}", f"ns-other-{sfx}"
    with transaction(db) as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_job_effects (operation_key, step_key, job_id, created_at) VALUES "
                "('op-old', 's', NULL, now() - interval '8 days'), ('op-new', 's', NULL, now()),"
                "('op-owned', 's', NULL, now() - interval '8 days')"
            )
        )
        conn.execute(
            text("UPDATE workflow_job_effects SET job_id = :j WHERE operation_key = 'op-owned'"),
            {"j": _finished(db, "succeeded", 1)[0]},
        )
        conn.execute(
            text(
                "INSERT INTO operation_audit (id, namespace_id, actor_id, action, target_type, target_id, created_at) "
                "VALUES (md5('a1' || :s), :keep, 'x', 'a', 't', '1', now() - interval '401 days'),"
                "(md5('a2' || :s), :other, 'x', 'a', 't', '1', now() - interval '401 days'),"
                "(md5('a3' || :s), :other, 'x', 'a', 't', '1', now() - interval '399 days')"
            ),
            {"s": sfx, "keep": keep_ns, "other": other_ns},
        )
    keep_longer = replace(POLICY, batch=100, by_namespace={keep_ns: 800})
    with db.begin() as conn:
        assert retention.prune_receipts(conn, 100, policy=keep_longer) == 1
        assert retention.prune_audit(conn, 100, policy=keep_longer) == 1
    with db.connect() as conn:
        keys = {r[0] for r in conn.execute(text("SELECT operation_key FROM workflow_job_effects"))}
    assert keys == {"op-new", "op-owned"}
    with db.connect() as conn:
        left = {
            r[0]
            for r in conn.execute(
                text("SELECT id FROM operation_audit WHERE namespace_id IN (:a, :b)"),
                {"a": keep_ns, "b": other_ns},
            )
        }
        expected = {conn.execute(text("SELECT md5(:v)"), {"v": v + sfx}).scalar() for v in ("a1", "a3")}
    assert left == expected
    # the audit stays append-only for everyone but the retention path, and even that path cannot
    # delete a recent row
    with pytest.raises(IntegrityError, match="append-only"), transaction(db) as conn:
        conn.execute(text("DELETE FROM operation_audit WHERE namespace_id = :ns"), {"ns": other_ns})
    with transaction(db) as conn:
        conn.execute(
            text(
                "INSERT INTO operation_audit (id, namespace_id, actor_id, action, target_type, target_id) "
                "VALUES (md5('recent' || :s), :ns, 'x', 'a', 't', '1')"
            ),
            {"s": sfx, "ns": other_ns},
        )
    with pytest.raises(IntegrityError, match="append-only"), transaction(db) as conn:
        conn.execute(text("SET LOCAL ledgerflow.retention = 'on'"))
        conn.execute(text("DELETE FROM operation_audit WHERE id = md5('recent' || :s)"), {"s": sfx})


def test_a_sweep_never_waits_for_a_locked_row(db):
    """SKIP LOCKED: a finished row held by another transaction is passed over, not waited for."""
    (held,) = _finished(db, "succeeded", 8)
    (free,) = _finished(db, "succeeded", 9)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with db.begin() as conn:
            conn.execute(text("SELECT id FROM workflow_jobs WHERE id = :id FOR UPDATE"), {"id": held})
            locked.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert locked.wait(5)
        with db.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '1s'"))
            assert retention.prune_jobs(conn, 10, policy=replace(POLICY, batch=10)) == 1
    finally:
        release.set()
        t.join()
    assert _exists(db, held) and not _exists(db, free)


def test_namespace_override_keeps_a_namespaces_jobs_longer(db):
    """The override is read through the job's instance: a job of an instance in ``ns-long`` (30 days)
    outlives the default 7 days; a job without an instance does not."""
    (plain,) = _finished(db, "succeeded", 10)
    (kept,) = _finished(db, "succeeded", 10)
    doc = {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 60,
        "steps": [{"key": "w", "kind": "TIMER", "delay_seconds": 1}],
    }
    iid = start(db, "ns-long", publish(db, "ns-long", doc), {})["id"]
    with transaction(db) as conn:
        conn.execute(text("DELETE FROM workflow_jobs WHERE instance_id = :i"), {"i": iid})
        conn.execute(text("UPDATE workflow_jobs SET instance_id = :i WHERE id = :id"), {"i": iid, "id": kept})
    with db.begin() as conn:
        assert (
            retention.prune_jobs(conn, 10, policy=replace(POLICY, batch=10, by_namespace={"ns-long": 30}))
            == 1
        )
    assert not _exists(db, plain) and _exists(db, kept)


def test_the_drain_runs_the_retention_sweeps(db, settings, monkeypatch):
    old = _finished(db, "succeeded", 8, n=4)
    monkeypatch.setenv("LEDGERFLOW_RETENTION_BATCH", "3")
    report = run_drain()
    assert report.swept["retention_jobs"] == 4
    assert not any(_exists(db, j) for j in old)
    # the plain ledger drain (no sweeps) removes nothing
    more = _finished(db, "succeeded", 8)
    drain(db, settings)
    assert _exists(db, more[0])


def test_outbox_events_and_integration_logs_go_after_the_retention(db):
    """Events of finished instances, and webhook deliveries / automation executions whose job is
    finished or gone, older than the job retention; a running instance's events and a delivery whose
    job is still pending stay."""
    from app.engine import retention as engine_retention
    from app.integrations import retention as integrations_retention

    doc = {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 60,
        "steps": [{"key": "w", "kind": "TIMER", "delay_seconds": 1}],
    }
    ns = "ns-" + uuid.uuid4().hex[:8]
    def_id = publish(db, ns, doc)
    done, live = start(db, ns, def_id, {})["id"], start(db, ns, def_id, {})["id"]
    pending_job = add_job(db, "webhook_delivery", {"d": 1})
    with transaction(db) as conn:
        conn.execute(
            text("UPDATE workflow_instances SET state = 'SUCCEEDED', completed_at = now() WHERE id = :i"),
            {"i": done},
        )
        # the start's batch also holds the engine's audit entry of the activation: kept for the audit
        # retention (400 days), not only the job retention (7)
        conn.execute(
            text(
                "UPDATE workflow_event_batches SET created_at = now() - interval '8 days' "
                "WHERE instance_id IN (:a, :b)"
            ),
            {"a": done, "b": live},
        )
        for i, job in enumerate((None, pending_job)):
            conn.execute(
                text(
                    "INSERT INTO webhook_deliveries (id, namespace_id, subscription_id, event_id, event_type, job_id, "
                    "created_at) VALUES (md5(:k), :ns, 's', md5(:k), 'workflow.started', :j, now() - interval '8 days')"
                ),
                {"k": f"{ns}-{i}", "ns": ns, "j": job},
            )
    policy = replace(POLICY, batch=100)
    with db.begin() as conn:
        assert engine_retention.prune_events(conn, 100, policy=policy) == 0
        conn.execute(
            text(
                "UPDATE workflow_event_batches SET created_at = now() - interval '401 days' "
                "WHERE instance_id IN (:a, :b)"
            ),
            {"a": done, "b": live},
        )
        assert engine_retention.prune_events(conn, 100, policy=policy) >= 1
        assert integrations_retention.prune_deliveries(conn, 100, policy=policy) == 1
        left = conn.execute(
            text(
                "SELECT instance_id, count(*) FROM workflow_events WHERE instance_id IN (:a, :b) GROUP BY 1"
            ),
            {"a": done, "b": live},
        ).all()
        kept = conn.execute(
            text("SELECT job_id FROM webhook_deliveries WHERE namespace_id = :ns"), {"ns": ns}
        ).all()
    assert [r[0] for r in left] == [live]
    assert [r[0] for r in kept] == [pending_job]


@pytest.mark.parametrize("overrides", [{}, {"ns-long": 90.0, "ns-short": 1.0}])
def test_each_sweep_reads_its_own_partial_index(db, overrides):
    """Finished jobs and dead letters have a partial index each on ``finished_at`` (migration 0016):
    the 7-day sweep walks ``ix_workflow_jobs_finished`` and never past the dead letters kept for 30
    days, the 30-day sweep ``ix_workflow_jobs_dead_letters``, because each states its statuses as
    literals that prove the index's predicate."""
    n, statuses = 20000, ["succeeded", "canceled", "dead", "failed"]
    with transaction(db) as conn:  # job g: statuses[g % 4], finished (g % 960) hours + 30 min ago
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, status, max_attempts, operation_key, trace_id, finished_at) "
                "SELECT 'delay_wake', 'workflow-ledger', "
                "       CAST((CAST(:statuses AS text[]))[1 + g % 4] AS workflow_job_status), 3, 'op', md5(g::text), "
                "       now() - (g % 960) * interval '1 hour' - interval '30 minutes' "
                "FROM generate_series(1, :n) g"
            ),
            {"statuses": statuses, "n": n},
        )
        conn.execute(text("ANALYZE workflow_jobs"))
        # the few instances of this database, analyzed as a server with autovacuum (the embedded one) has
        # them: reading so small a table whole is the right plan for the per-namespace override's look-up
        conn.execute(text("ANALYZE workflow_instances"))
    policy = replace(POLICY, by_namespace=overrides, batch=100)
    for dead, index, other in (
        (False, "ix_workflow_jobs_finished", "ix_workflow_jobs_dead_letters"),
        (True, "ix_workflow_jobs_dead_letters", "ix_workflow_jobs_finished"),
    ):
        statement, params = retention.prune_jobs_sql(policy, dead=dead)
        with db.connect() as conn:
            plan = "\n".join(
                r[0] for r in conn.execute(text(f"EXPLAIN {statement.text}"), {**params, "limit": 100})
            )
        assert index in plan and other not in plan and "Seq Scan on workflow_jobs" not in plan, plan
    # and each removes exactly its own: finished jobs past 7 days, dead letters past 30
    whole = replace(POLICY, batch=n)
    with transaction(db) as conn:
        removed = retention.prune_jobs(conn, n, policy=whole)
    with transaction(db) as conn:
        removed_dead = retention.prune_jobs(conn, n, policy=whole, dead=True)
    hours = [(statuses[g % 4], g % 960) for g in range(1, n + 1)]
    assert removed == sum(1 for s, h in hours if s in ("succeeded", "canceled") and h >= 7 * 24)
    assert removed_dead == sum(1 for s, h in hours if s in ("dead", "failed") and h >= 30 * 24)
