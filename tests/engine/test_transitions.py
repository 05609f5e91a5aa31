"""Behaviour fixed with the engine state machine: each test failed before.

- a ``delay_wake`` job with an unknown wake is dead (PERMANENT_ERROR), never a silent success;
- a task's deadline is enforced by its instance's one ``task_timeout`` job: completing or failing a
  task writes no job, and the job times out every overdue task and arms itself again;
- every engine job binds the row its payload names to the job's own instance: a payload naming
  another instance's activation / task / signal / child is dead with a clear reason and changes nothing;
- a guarded transition refuses a move from a state it may not leave."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine import retention as engine_retention
from app.engine import task_protocol
from app.engine.row_access import read_step
from app.engine.transitions import TransitionRefused, step_moves
from app.ids import new_id
from app.ledger.enqueue import enqueue
from app.ledger.retention import RetentionPolicy
from tests.engine.helpers import claim_task, instance, make_due, publish, run_jobs, start, step

NS = "ns-" + new_id()[:8]

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "t", "kind": "TASK", "queue": "q", "timeout_seconds": 60},
        {"key": "wait", "kind": "TIMER", "delay_seconds": 30, "after": ["t"]},
    ],
}


def _job(eng, job_id: int) -> dict:
    with eng.connect() as conn:
        return dict(
            conn.execute(
                text("SELECT type, status, error_code, last_error FROM workflow_jobs WHERE id = :id"),
                {"id": job_id},
            )
            .first()
            ._mapping
        )


def _enqueue(eng, type_: str, payload: dict, instance_id: str) -> int:
    with transaction(eng) as conn:
        return enqueue(conn, type_, payload, instance_id=instance_id).id


def _snapshot(eng, iid: str) -> tuple:
    """The states of every row of the instance (and its revision)."""
    with eng.connect() as conn:
        rows = tuple(
            conn.execute(
                text(f"SELECT array_agg(state ORDER BY id) FROM workflow_{t} WHERE instance_id = :i"),
                {"i": iid},
            ).scalar()
            for t in ("steps", "all_activations", "tasks", "waits", "signals")
        )
        return rows + tuple(
            conn.execute(
                text("SELECT state, revision FROM workflow_instances WHERE id = :i"), {"i": iid}
            ).first()
        )


def test_unknown_delay_wake_is_dead(eng):
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    job_id = _enqueue(eng, "delay_wake", {"wake": "bogus"}, iid)
    run_jobs(eng)
    job = _job(eng, job_id)
    assert job["status"] == "dead" and job["error_code"] == "PERMANENT_ERROR"
    assert "unknown wake 'bogus'" in job["last_error"]


def _timeout_jobs(eng, iid: str) -> list:
    with eng.connect() as conn:
        return conn.execute(
            text(
                "SELECT id, status::text AS status, task_id, run_at FROM workflow_jobs "
                "WHERE type = 'task_timeout' AND instance_id = :i ORDER BY id"
            ),
            {"i": iid},
        ).all()


def test_a_settled_task_writes_no_job_the_instances_one_timeout_job_stays(eng):
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    armed = _timeout_jobs(eng, iid)
    task = claim_task(eng, NS, "q")
    assert [(j.status, j.task_id) for j in armed] == [("pending", None)]  # one per instance, no task named
    with eng.connect() as conn:
        deadline = conn.execute(
            text("SELECT deadline_at FROM workflow_tasks WHERE id = :t"), {"t": task["id"]}
        ).scalar()
    assert armed[0].run_at == deadline  # due at the task's deadline (the same transaction's now())
    with transaction(eng) as conn:
        task_protocol.complete(conn, NS, task["id"], task["epoch"], {"ok": True})
    assert _timeout_jobs(eng, iid) == armed  # untouched: nothing written for the settled task
    assert step(eng, NS, iid, "wait")["step"]["state"] == "WAITING"


def test_a_failed_task_writes_no_job_and_its_retry_keeps_the_one_timeout_job(eng):
    retrying = {**DOC, "steps": [{**DOC["steps"][0], "retry": {"max_attempts": 3}}, DOC["steps"][1]]}
    iid = start(eng, NS, publish(eng, NS, retrying), {})["id"]
    armed = _timeout_jobs(eng, iid)
    task = claim_task(eng, NS, "q")
    with transaction(eng) as conn:
        task_protocol.fail(conn, NS, task["id"], task["epoch"], {"message": "try again", "retryable": True})
    assert step(eng, NS, iid, "t")["step"]["state"] == "WAITING"  # the retry backoff
    assert _timeout_jobs(eng, iid) == armed


def test_the_timeout_job_times_out_every_overdue_task_and_arms_itself_for_the_next(eng):
    two = {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 600,
        "steps": [
            {
                "key": "short",
                "kind": "TASK",
                "queue": "q2",
                "timeout_seconds": 5,
                "retry": {"max_attempts": 3},
            },
            {"key": "long", "kind": "TASK", "queue": "q2", "timeout_seconds": 60},
        ],
    }
    iid = start(eng, NS, publish(eng, NS, two), {})["id"]
    (first,) = _timeout_jobs(eng, iid)
    with eng.begin() as conn:  # the short task's deadline passes (and the job that enforces it is due)
        conn.execute(
            text(
                "UPDATE workflow_tasks SET deadline_at = now() - interval '1 ms' "
                "WHERE instance_id = :i AND step_key = 'short'"
            ),
            {"i": iid},
        )
        conn.execute(text("UPDATE workflow_jobs SET run_at = now() WHERE id = :j"), {"j": first.id})
    assert ("task_timeout", "succeeded") in run_jobs(eng)
    assert step(eng, NS, iid, "short")["step"]["state"] == "WAITING"  # its retry waits for the backoff
    assert step(eng, NS, iid, "long")["step"]["state"] == "ACTIVE"
    with eng.connect() as conn:
        long_deadline = conn.execute(
            text("SELECT deadline_at FROM workflow_tasks WHERE instance_id = :i AND step_key = 'long'"),
            {"i": iid},
        ).scalar()
    jobs = _timeout_jobs(eng, iid)
    assert [j.status for j in jobs] == ["succeeded", "pending"]
    assert abs((jobs[1].run_at - long_deadline).total_seconds()) < 0.001  # armed at the long task's deadline


@pytest.mark.parametrize("kind", ["timer", "task_timeout", "signal_expiry", "subprocess_join"])
def test_a_job_naming_another_instances_row_is_dead_and_changes_nothing(eng, kind):
    def_id = publish(eng, NS, DOC)
    victim = start(eng, NS, def_id, {})["id"]
    attacker = start(eng, NS, def_id, {})["id"]
    # the victim reaches its TIMER; its task and activation are what the forged payloads name
    task = claim_task(eng, NS, "q")
    if task["instance_id"] != victim:
        victim, attacker = attacker, victim
    with transaction(eng) as conn:
        task_protocol.complete(conn, NS, task["id"], task["epoch"], {})
        timer = read_step(conn, victim, "wait")
        victim_task = conn.execute(
            text("SELECT id FROM workflow_tasks WHERE instance_id = :i AND state = 'PENDING'"), {"i": victim}
        ).scalar()
    make_due(eng)
    before = _snapshot(eng, victim)
    payloads = {
        "timer": ("delay_wake", {"wake": "timer", "activation_id": timer["activation_id"]}),
        "task_timeout": ("task_timeout", {"task_id": victim_task or task["id"]}),
        "signal_expiry": ("delay_wake", {"wake": "signal_expiry", "signal_id": new_id()}),
        "subprocess_join": ("subprocess_join", {"child_id": victim}),
    }
    type_, payload = payloads[kind]
    job_id = _enqueue(eng, type_, payload, attacker)
    with eng.begin() as conn:  # only the forged job is due
        conn.execute(
            text("UPDATE workflow_jobs SET run_at = now() + interval '1 hour' WHERE id <> :id"),
            {"id": job_id},
        )
    run_jobs(eng)
    job = _job(eng, job_id)
    assert job["status"] == "dead" and job["error_code"] == "FOREIGN_REFERENCE", job
    assert "another workflow" in job["last_error"] or "does not exist" in job["last_error"]
    assert _snapshot(eng, victim) == before
    assert instance(eng, victim)["state"] == "WAITING"


def test_guarded_transition_refuses_a_move_from_a_terminal_state(eng):
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    with transaction(eng) as conn:
        st = read_step(conn, iid, "t")
        step_moves.succeed(conn, st, {"x": 1})
    with pytest.raises(TransitionRefused, match="not one of ACTIVE, WAITING"), transaction(eng) as conn:
        step_moves.fail(conn, read_step(conn, iid, "t"), {"code": "X"})


def test_retention_removes_settled_signals_of_finished_instances_only(eng):
    def_id = publish(eng, NS, DOC)
    done, live = start(eng, NS, def_id, {})["id"], start(eng, NS, def_id, {})["id"]
    with eng.begin() as conn:
        conn.execute(
            text("UPDATE workflow_instances SET state = 'SUCCEEDED', completed_at = now() WHERE id = :i"),
            {"i": done},
        )
        for iid in (done, live):
            for state in ("CONSUMED", "PENDING"):
                conn.execute(
                    text(
                        "INSERT INTO workflow_signals (id, namespace_id, instance_id, name, payload_version, "
                        "target_step_key, target_activation_sequence, correlation_key, payload, actor_id, reason, "
                        "state, expires_at, resolved_at) VALUES (md5(random()::text), :ns, :i, 'n', 'v1', 't', 1, "
                        "'k', '{}', 'a', 'r', :s, now(), CASE WHEN :s = 'PENDING' THEN NULL "
                        "ELSE now() - interval '8 days' END)"
                    ),
                    {"ns": NS, "i": iid, "s": state},
                )
    with eng.begin() as conn:
        assert engine_retention.prune_signals(conn, 100, policy=RetentionPolicy(jobs_days=7)) == 1
        left = conn.execute(text("SELECT instance_id, state FROM workflow_signals ORDER BY 1, 2")).all()
    assert sorted(map(tuple, left)) == sorted([(done, "PENDING"), (live, "CONSUMED"), (live, "PENDING")])


def test_a_step_and_its_activation_settle_together_or_not_at_all(eng):
    """``step_moves.succeed`` moves the step and its current activation (held on the step row) in one
    guarded statement: when the activation may not move (here: it already ended), the move is refused
    and the step stays as it was."""
    def_id = publish(eng, NS, DOC)
    iid = start(eng, NS, def_id, {})["id"]
    with eng.connect() as conn:
        row = read_step(conn, iid, "t")
    assert row is not None and row["state"] == "ACTIVE"
    with transaction(eng) as conn:
        conn.execute(
            text("UPDATE workflow_steps SET act_state = 'CANCELLED' WHERE activation_id = :a"),
            {"a": row["activation_id"]},
        )
    with (
        pytest.raises(TransitionRefused, match="step t and its activation -> SUCCEEDED"),
        transaction(eng) as conn,
    ):
        step_moves.succeed(conn, row, {"ok": True})
    with eng.connect() as conn:
        after = read_step(conn, iid, "t")
    assert after is not None and (after["state"], after["revision"]) == ("ACTIVE", row["revision"])
    with transaction(eng) as conn:  # the activation back as it was: the same move goes through
        conn.execute(
            text("UPDATE workflow_steps SET act_state = 'ACTIVE' WHERE activation_id = :a"),
            {"a": row["activation_id"]},
        )
    with transaction(eng) as conn:
        step_moves.succeed(conn, row, {"ok": True})
    with eng.connect() as conn:
        done = read_step(conn, iid, "t")
    assert done is not None and (done["state"], done["act_state"]) == ("SUCCEEDED", "SUCCEEDED")
