"""Suspend / resume / clear an instance's jobs (L-PAUSE-1..4)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from app.db import transaction
from app.ledger import transitions
from app.ledger.states import JobType
from app.ledger.suspend import clear_jobs, resume_jobs, suspend_jobs
from tests.ledger_helpers import ADVANCE, OUTBOUND, add_job, attempts, claim, claim_one, job, scalar

INSTANCE = "1" * 32
OTHER = "2" * 32
ALL_TYPES = [t.value for t in JobType]
SUSPENDED_BY_SPEC = {
    "delay_wake",
    "task_timeout",
    "trigger_dispatch",
    "external_dispatch",
    "subprocess_spawn",
    "subprocess_join",
}
CLEARED_BY_SPEC = {"delay_wake", "task_timeout", "external_dispatch", "subprocess_spawn", "subprocess_join"}


def _one_of_each_type(engine, instance=INSTANCE, delay_ms=60_000):
    return {t: add_job(engine, t, {"t": t}, instance_id=instance, delay_ms=delay_ms) for t in ALL_TYPES}


def _statuses(engine, ids):
    return {t: job(engine, j)["status"] for t, j in ids.items()}


def test_suspend_saves_the_remaining_ms_and_resume_restores_it_exactly(db, recorder):
    j = add_job(db, "delay_wake", {}, instance_id=INSTANCE, delay_ms=90_000)
    recorder.sent.clear()  # the enqueue's own hint
    with transaction(db) as conn:
        conn.execute(
            text("UPDATE workflow_jobs SET run_at = run_at - interval '30 seconds' WHERE id = :id"), {"id": j}
        )
    with transaction(db) as conn:
        expected_ms = conn.execute(
            text("SELECT extract(epoch FROM run_at - now()) * 1000 FROM workflow_jobs WHERE id = :id"),
            {"id": j},
        ).scalar()
        moved = suspend_jobs(conn, INSTANCE)
    assert [(m["id"], m["status"]) for m in moved] == [(j, "paused")]
    paused = job(db, j)
    assert paused["status"] == "paused" and paused["generation"] == 2
    assert abs(paused["remaining_ms"] - float(expected_ms)) <= 1
    assert 59_000 < paused["remaining_ms"] <= 60_000
    assert claim(db) == [] and recorder.sent == []

    with transaction(db) as conn:
        (resumed,) = resume_jobs(conn, INSTANCE)
        assert recorder.sent == []  # the hint goes out after commit
    jr = job(db, j)
    assert jr["status"] == "pending" and jr["generation"] == 3 and jr["remaining_ms"] is None
    # exactly the saved remainder from the moment of resume (database time)
    assert jr["run_at"] - jr["updated_at"] == timedelta(milliseconds=paused["remaining_ms"])
    assert resumed["run_at"] == jr["run_at"]
    assert recorder.sent == [ADVANCE]


def test_an_overdue_job_resumes_due_at_once(db):
    j = add_job(db, "task_timeout", {}, instance_id=INSTANCE, delay_ms=-5000)
    with transaction(db) as conn:
        suspend_jobs(conn, INSTANCE)
    assert job(db, j)["remaining_ms"] == 0
    with transaction(db) as conn:
        resume_jobs(conn, INSTANCE)
    assert claim_one(db)["id"] == j


def test_suspend_scope_is_exactly_l_pause_1(db):
    ids = _one_of_each_type(db)
    other = _one_of_each_type(db, OTHER)
    with transaction(db) as conn:
        moved = suspend_jobs(conn, INSTANCE)
    assert {r["id"] for r in moved} == {ids[t] for t in SUSPENDED_BY_SPEC}
    st = _statuses(db, ids)
    assert {t for t, s in st.items() if s == "paused"} == SUSPENDED_BY_SPEC
    # event_dispatch, webhook_delivery, automation_action, compensation_action (and the schedule
    # launcher) keep running: untouched, generation unchanged
    for t in set(ALL_TYPES) - SUSPENDED_BY_SPEC:
        assert (st[t], job(db, ids[t])["generation"]) == ("pending", 1), t
    assert set(_statuses(db, other).values()) == {"pending"}
    with transaction(db) as conn:
        resumed = resume_jobs(conn, INSTANCE)
    assert {r["id"] for r in resumed} == {ids[t] for t in SUSPENDED_BY_SPEC}
    assert set(_statuses(db, ids).values()) == {"pending"}


def test_suspend_leaves_finished_and_failed_jobs_alone(db):
    ids = {}
    for status in ("succeeded", "failed", "dead", "canceled"):
        ids[status] = add_job(db, "delay_wake", {"s": status}, instance_id=INSTANCE)
        with transaction(db) as conn:
            conn.execute(
                text("UPDATE workflow_jobs SET status = :s WHERE id = :id"), {"s": status, "id": ids[status]}
            )
    with transaction(db) as conn:
        assert suspend_jobs(conn, INSTANCE) == []
    assert _statuses(db, ids) == {s: s for s in ids}


def test_suspending_a_running_job(db):
    """Running without an open marker -> paused with nothing left to wait; running with an open
    side-effect marker -> dead, EXTERNAL_OUTCOME_UNKNOWN (L-PAUSE-2). Both attempts are closed."""
    plain = add_job(db, "trigger_dispatch", {"n": 1}, instance_id=INSTANCE)
    unsafe = add_job(db, "external_dispatch", {"n": 2}, instance_id=INSTANCE)
    rows = {r["id"]: r for r in claim(db, OUTBOUND, limit=2)}
    r = rows[unsafe]
    with transaction(db) as conn:
        assert transitions.set_effect_marker(
            conn, unsafe, r["generation"], str(r["lease_token"]), {"m": "POST"}
        )
    with transaction(db) as conn:
        moved = {m["id"]: m["status"] for m in suspend_jobs(conn, INSTANCE)}
    assert moved == {plain: "paused", unsafe: "dead"}
    p, u = job(db, plain), job(db, unsafe)
    assert (p["status"], p["remaining_ms"], p["generation"], p["lease_token"]) == ("paused", 0, 2, None)
    assert (u["status"], u["error_code"], u["effect_marker"]) == (
        "dead",
        "EXTERNAL_OUTCOME_UNKNOWN",
        {"m": "POST"},
    )
    assert "outcome needs confirmation" in u["last_error"] and u["finished_at"] is not None
    assert [a["status"] for a in attempts(db, plain)] == ["canceled"]
    assert [a["status"] for a in attempts(db, unsafe)] == ["canceled"]
    # resume brings back only the paused one
    with transaction(db) as conn:
        assert [x["id"] for x in resume_jobs(conn, INSTANCE)] == [plain]
    assert job(db, unsafe)["status"] == "dead"


def test_clear_scope_is_exactly_l_pause_4(db):
    ids = _one_of_each_type(db)
    other = _one_of_each_type(db, OTHER)
    with transaction(db) as conn:
        cleared = clear_jobs(conn, INSTANCE, "instance terminated")
    assert {r["id"] for r in cleared} == {ids[t] for t in CLEARED_BY_SPEC}
    st = _statuses(db, ids)
    assert {t for t, s in st.items() if s == "canceled"} == CLEARED_BY_SPEC
    assert {t for t, s in st.items() if s == "pending"} == set(ALL_TYPES) - CLEARED_BY_SPEC
    for t in CLEARED_BY_SPEC:
        jr = job(db, ids[t])
        assert (jr["generation"], jr["error_code"], jr["last_error"]) == (
            2,
            "CANCELED",
            "instance terminated",
        )
    assert set(_statuses(db, other).values()) == {"pending"}


def test_clear_cancels_paused_running_and_dead_jobs_of_the_scope(db):
    paused = add_job(db, "delay_wake", {"n": 1}, instance_id=INSTANCE, delay_ms=60_000)
    with transaction(db) as conn:
        suspend_jobs(conn, INSTANCE)
    running = add_job(db, "subprocess_join", {"n": 2}, instance_id=INSTANCE)
    claim_one(db)
    dead = add_job(db, "task_timeout", {"n": 3}, instance_id=INSTANCE)
    done = add_job(db, "task_timeout", {"n": 4}, instance_id=INSTANCE)
    with transaction(db) as conn:
        conn.execute(text("UPDATE workflow_jobs SET status = 'dead' WHERE id = :id"), {"id": dead})
        conn.execute(text("UPDATE workflow_jobs SET status = 'succeeded' WHERE id = :id"), {"id": done})
    with transaction(db) as conn:
        cleared = {r["id"] for r in clear_jobs(conn, INSTANCE)}
    assert cleared == {paused, running, dead}
    assert job(db, paused)["remaining_ms"] is None and job(db, paused)["status"] == "canceled"
    assert job(db, running)["lease_token"] is None
    assert [a["status"] for a in attempts(db, running)] == ["canceled"]
    assert job(db, done)["status"] == "succeeded"
    assert scalar(db, "SELECT count(*) FROM workflow_jobs WHERE status = 'running'") == 0


def test_cancel_waiting_cancels_only_the_waiting_jobs_of_the_types_in_one_statement(db):
    """An instance that ends cancels its pending and paused jobs of the given types (generation + 1) and
    leaves a running one, a dead one, other types and other instances as they are."""
    paused = add_job(db, "delay_wake", {"n": 1}, instance_id=INSTANCE, delay_ms=60_000)
    with transaction(db) as conn:
        suspend_jobs(conn, INSTANCE)
    pending = add_job(db, "task_timeout", {"n": 2}, instance_id=INSTANCE, delay_ms=60_000)
    running = add_job(db, "subprocess_join", {"n": 3}, instance_id=INSTANCE)
    claim_one(db)
    dead = add_job(db, "delay_wake", {"n": 4}, instance_id=INSTANCE, delay_ms=60_000)
    with transaction(db) as conn:
        conn.execute(text("UPDATE workflow_jobs SET status = 'dead' WHERE id = :id"), {"id": dead})
    other_type = add_job(db, "event_dispatch", {"n": 5}, instance_id=INSTANCE, delay_ms=60_000)
    other_instance = add_job(db, "task_timeout", {"n": 6}, instance_id=OTHER, delay_ms=60_000)
    types = ["delay_wake", "task_timeout", "subprocess_join"]
    with transaction(db) as conn:
        canceled = transitions.cancel_waiting(conn, INSTANCE, types, "workflow succeeded")
    assert sorted(r["id"] for r in canceled) == sorted([paused, pending])
    for j in (paused, pending):
        jr = job(db, j)
        assert (jr["status"], jr["error_code"], jr["last_error"], jr["remaining_ms"]) == (
            "canceled",
            "CANCELED",
            "workflow succeeded",
            None,
        )
    assert job(db, pending)["generation"] == 2
    assert job(db, running)["status"] == "running" and job(db, running)["lease_token"] is not None
    assert job(db, dead)["status"] == "dead"
    assert job(db, other_type)["status"] == "pending" and job(db, other_instance)["status"] == "pending"
