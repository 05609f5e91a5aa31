"""TASK retry backoff (X-DEF retry policy), expired task leases swept back to their queue
by the drain (X-TASK), and a parent that fails stopping its running SUBWORKFLOW child."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine import task_protocol
from app.errors import InvalidArgument, StateConflict
from app.ids import new_id
from tests.engine.helpers import claim_task, complete_task, instance, make_due, publish, run_jobs, start, step

NS = "ns-" + new_id()[:8]


def _task_doc(retry: dict, queue: str = "rq", **extra) -> dict:
    return {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 3600,
        "steps": [{"key": "t", "kind": "TASK", "queue": queue, "retry": retry, **extra}],
    }


def _fail(eng, task: dict, retryable: bool = True) -> None:
    with transaction(eng) as conn:
        task_protocol.fail(conn, NS, task["id"], task["epoch"], {"message": "boom", "retryable": retryable})


def _retry_jobs(eng, iid: str) -> list:
    with eng.connect() as conn:
        return conn.execute(
            text(
                "SELECT payload->>'attempt' AS attempt, status, "
                "extract(epoch FROM run_at - now())::float AS due_in FROM workflow_jobs "
                "WHERE instance_id = :i AND type = 'delay_wake' AND payload->>'wake' = 'task_retry' ORDER BY id"
            ),
            {"i": iid},
        ).all()


def _open_tasks(eng, iid: str) -> int:
    with eng.connect() as conn:
        return conn.execute(
            text(
                "SELECT count(*) FROM workflow_tasks WHERE instance_id = :i AND state IN ('PENDING', 'CLAIMED')"
            ),
            {"i": iid},
        ).scalar()


# -- retry backoff ----------------------------------------------------------------------------------
def test_backoff_curve_defaults_and_caps():
    assert [task_protocol.retry_delay_seconds({}, n) for n in (1, 2, 3, 5, 6, 9)] == [
        30,
        60,
        120,
        480,
        900,
        900,
    ]
    policy = {"backoff_seconds": 5, "max_backoff_seconds": 12}
    assert [task_protocol.retry_delay_seconds(policy, n) for n in (1, 2, 3)] == [5, 10, 12]
    assert task_protocol.retry_delay_seconds({"backoff_seconds": 0}, 4) == 0


def test_retry_policy_fields_are_validated(eng):
    publish(eng, NS, _task_doc({"max_attempts": 2, "backoff_seconds": 5, "max_backoff_seconds": 60}))
    publish(eng, NS, _task_doc({"max_attempts": 2, "backoff_seconds": 0}))
    with pytest.raises(InvalidArgument) as e:
        publish(eng, NS, _task_doc({"max_attempts": 2, "backoff_seconds": -1, "jitter": True}))
    errors = {x.field: x.message for x in e.value.field_errors}
    assert errors["steps[0].retry.jitter"] == "unknown field"
    assert errors["steps[0].retry.backoff_seconds"] == "must be an integer from 0 to 86400"


def test_failed_task_retries_after_backoff_not_at_once(eng):
    def_id = publish(eng, NS, _task_doc({"max_attempts": 3}))
    iid = start(eng, NS, def_id, {})["id"]
    t1 = claim_task(eng, NS, "rq")
    _fail(eng, t1)
    # attempt 1 failed: no new task yet; the step (and the instance) wait ~30 s for attempt 2
    view = step(eng, NS, iid, "t")
    assert view["step"]["state"] == "WAITING" and view["step"]["task_id"] == t1["id"]
    assert instance(eng, iid)["state"] == "WAITING"
    assert _open_tasks(eng, iid) == 0
    [job] = _retry_jobs(eng, iid)
    assert job.attempt == "2" and job.status == "pending" and 28 < job.due_in <= 30
    assert "next_attempt_at" in view
    assert run_jobs(eng) == []  # not due yet
    make_due(eng)
    run_jobs(eng)
    view = step(eng, NS, iid, "t")
    assert view["step"]["state"] == "ACTIVE" and view["step"]["task_id"] != t1["id"]
    assert "next_attempt_at" not in view and instance(eng, iid)["state"] == "RUNNING"
    t2 = claim_task(eng, NS, "rq")
    assert t2["attempt"] == 2
    _fail(eng, t2)
    # the second delay doubles (60 s)
    assert 58 < _retry_jobs(eng, iid)[-1].due_in <= 60
    make_due(eng)
    run_jobs(eng)
    t3 = claim_task(eng, NS, "rq")
    assert t3["attempt"] == 3
    complete_task(eng, NS, t3, {"ok": True})
    assert instance(eng, iid)["state"] == "SUCCEEDED"


def test_custom_and_zero_backoff(eng):
    def_id = publish(eng, NS, _task_doc({"max_attempts": 2, "backoff_seconds": 0}))
    iid = start(eng, NS, def_id, {})["id"]
    t1 = claim_task(eng, NS, "rq")
    _fail(eng, t1)
    view = step(eng, NS, iid, "t")  # backoff 0: attempt 2 at once (the old behaviour, opt-in)
    assert view["step"]["state"] == "ACTIVE" and view["step"]["task_id"] != t1["id"]
    assert _retry_jobs(eng, iid) == []
    doc = _task_doc({"max_attempts": 2, "backoff_seconds": 7, "max_backoff_seconds": 5}, queue="rq2")
    iid = start(eng, NS, publish(eng, NS, doc), {})["id"]
    _fail(eng, claim_task(eng, NS, "rq2"))
    assert 3 < _retry_jobs(eng, iid)[0].due_in <= 5  # capped


def test_non_retryable_failure_and_stale_retry_wake(eng):
    def_id = publish(eng, NS, _task_doc({"max_attempts": 3}))
    iid = start(eng, NS, def_id, {})["id"]
    _fail(eng, claim_task(eng, NS, "rq"), retryable=False)
    assert instance(eng, iid)["state"] == "FAILED" and _retry_jobs(eng, iid) == []
    # a retry wake for an instance that failed meanwhile changes nothing (its job was canceled)
    def_id = publish(eng, NS, _task_doc({"max_attempts": 3}, timeout_seconds=60))
    iid = start(eng, NS, def_id, {})["id"]
    _fail(eng, claim_task(eng, NS, "rq"))
    with eng.begin() as conn:
        conn.execute(
            text("UPDATE workflow_instances SET deadline_at = now() - interval '1 ms' WHERE id = :i"),
            {"i": iid},
        )
        conn.execute(  # the instance's watch enforces the deadline: due before the retry wake
            text(
                "UPDATE workflow_jobs SET run_at = now() - interval '1 ms' WHERE instance_id = :i "
                "AND type = 'task_timeout' AND status = 'pending'"
            ),
            {"i": iid},
        )
    make_due(eng)
    run_jobs(eng)
    assert instance(eng, iid)["state"] == "FAILED" and _open_tasks(eng, iid) == 0
    assert _retry_jobs(eng, iid)[0].status == "canceled"


# -- expired task leases ----------------------------------------------------------------------------
def _expire_lease(eng, task_id: str) -> None:
    with eng.begin() as conn:
        conn.execute(
            text("UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 ms' WHERE id = :i"),
            {"i": task_id},
        )


def _task_row(eng, task_id: str) -> dict:
    with eng.connect() as conn:
        return dict(
            conn.execute(
                text("SELECT state, epoch, lease_expires_at FROM workflow_tasks WHERE id = :i"),
                {"i": task_id},
            )
            .one()
            ._mapping
        )


def test_drain_returns_expired_task_leases_to_their_queue(eng):
    from actors.maintenance import run_drain

    def_id = publish(eng, NS, _task_doc({"max_attempts": 1}))
    iid = start(eng, NS, def_id, {})["id"]
    t = claim_task(eng, NS, "rq")
    _expire_lease(eng, t["id"])
    # a result for the expired claim is refused at once (before any sweep or re-claim)
    with pytest.raises(StateConflict), transaction(eng) as conn:
        task_protocol.complete(conn, NS, t["id"], t["epoch"], {"late": True})
    with pytest.raises(StateConflict), transaction(eng) as conn:
        task_protocol.heartbeat(conn, NS, t["id"], t["epoch"], 60)
    assert _task_row(eng, t["id"])["state"] == "CLAIMED"
    report = run_drain()
    assert report.ran and report.swept["task_leases"] >= 1
    row = _task_row(eng, t["id"])
    assert row["state"] == "PENDING" and row["lease_expires_at"] is None and row["epoch"] == 1
    with eng.connect() as conn:
        view = task_protocol.task_view(task_protocol.read_task(conn, t["id"], NS))
    assert view["state"] == "PENDING" and "lease_expires_at" not in view
    assert step(eng, NS, iid, "t")["step"]["state"] == "ACTIVE"
    again = claim_task(eng, NS, "rq")
    assert again["id"] == t["id"] and again["epoch"] == 2
    complete_task(eng, NS, again, {"ok": 1})
    assert instance(eng, iid)["state"] == "SUCCEEDED"


def test_sweep_leaves_live_leases_and_cancelling_instances(eng):
    def_id = publish(eng, NS, _task_doc({"max_attempts": 1}))
    live_iid = start(eng, NS, def_id, {})["id"]
    live = claim_task(eng, NS, "rq")
    cancelling_iid = start(eng, NS, def_id, {})["id"]
    held = claim_task(eng, NS, "rq")
    assert held["instance_id"] == cancelling_iid and live["instance_id"] == live_iid
    _expire_lease(eng, held["id"])
    with eng.begin() as conn:
        conn.execute(
            text("UPDATE workflow_instances SET cancel_requested_at = now() WHERE id = :i"),
            {"i": cancelling_iid},
        )
    with transaction(eng) as conn:
        assert task_protocol.return_expired_leases(conn) == 0
    assert _task_row(eng, live["id"])["state"] == "CLAIMED"
    assert _task_row(eng, held["id"])["state"] == "CLAIMED"  # the cancel's settlement decides


# -- a failing parent stops its running child ---------------------------------------------------------
def _child_doc() -> dict:
    return {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 3600,
        "steps": [{"key": "work", "kind": "TASK", "queue": "kid-q"}],
    }


def _parent_doc(child_def: str) -> dict:
    return {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 3600,
        "steps": [
            {"key": "child", "kind": "SUBWORKFLOW", "definition_id": child_def, "version": "v1"},
            {"key": "side", "kind": "TASK", "queue": "side-q"},
        ],
    }


def _started_parent_with_child(eng) -> tuple[str, str]:
    child_def = publish(eng, NS, _child_doc())
    parent_def = publish(eng, NS, _parent_doc(child_def))
    pid = start(eng, NS, parent_def, {})["id"]
    run_jobs(eng)  # subprocess_spawn
    cid = step(eng, NS, pid, "child")["child_workflow_id"]
    assert instance(eng, cid)["state"] == "RUNNING"
    return pid, cid


def test_parent_step_failure_cancels_running_child(eng):
    pid, cid = _started_parent_with_child(eng)
    _fail_side = claim_task(eng, NS, "side-q")
    with transaction(eng) as conn:
        task_protocol.fail(
            conn, NS, _fail_side["id"], _fail_side["epoch"], {"message": "no", "retryable": False}
        )
    parent = instance(eng, pid)
    assert parent["state"] == "FAILED" and parent["stop_kind"] == "FAILURE"
    child = instance(eng, cid)
    assert child["state"] == "CANCELLED" and child["stop_kind"] == "CANCEL"
    assert "cancel_requested_at" in child and "completed_at" in child
    assert _open_tasks(eng, cid) == 0
    with eng.connect() as conn:
        reason = conn.execute(
            text(
                "SELECT after->>'reason' FROM workflow_operations WHERE workflow_id = :c "
                "AND action = 'workflow.control.cancel'"
            ),
            {"c": cid},
        ).scalar()
    assert reason == f"parent workflow {pid} failed (TASK_FAILED)"
    run_jobs(eng)  # the child's subprocess_join finds the parent finished: nothing changes
    assert instance(eng, pid)["state"] == "FAILED"


def test_parent_deadline_cancels_child_with_task_in_flight(eng):
    pid, cid = _started_parent_with_child(eng)
    in_flight = claim_task(eng, NS, "kid-q")
    with eng.begin() as conn:
        conn.execute(
            text("UPDATE workflow_instances SET deadline_at = now() - interval '1 ms' WHERE id = :i"),
            {"i": pid},
        )
        conn.execute(
            text(
                "UPDATE workflow_jobs SET run_at = now() WHERE instance_id = :i AND type = 'task_timeout' AND status = 'pending'"
            ),
            {"i": pid},
        )
    run_jobs(eng)
    assert instance(eng, pid)["state"] == "FAILED"
    # W-CTL-3: the child's in-flight task keeps its permit; the child is CANCELLING until it ends
    child = instance(eng, cid)
    assert child["state"] == "CANCELLING" and child["stop_kind"] == "CANCEL"
    complete_task(eng, NS, in_flight, {"late": "but collected"})
    assert instance(eng, cid)["state"] == "CANCELLED"


def test_child_start_over_quota_is_retried_by_the_spawn_job(eng, monkeypatch):
    """The quotas apply to children too: a refused child start fails the ``subprocess_spawn`` attempt,
    which the ledger retries with its backoff (nothing half-created); the parent step stays ACTIVE."""
    child_def = publish(eng, NS, _child_doc())
    parent_def = publish(eng, NS, {**_parent_doc(child_def), "steps": _parent_doc(child_def)["steps"][:1]})
    monkeypatch.setenv("LEDGERFLOW_APPLICATION_WORK_LIMIT", "1")  # the parent itself fills it
    pid = start(eng, NS, parent_def, {})["id"]
    [(_, outcome)] = [r for r in run_jobs(eng) if r[0] == "subprocess_spawn"]
    assert outcome.startswith("retry: ") and "the quota is 1" in outcome
    view = step(eng, NS, pid, "child")
    assert view["step"]["state"] == "ACTIVE" and "child_workflow_id" not in view
    with eng.connect() as conn:
        children = conn.execute(
            text("SELECT count(*) FROM workflow_instances WHERE parent_instance_id = :p"), {"p": pid}
        ).scalar()
    assert children == 0
    monkeypatch.setenv("LEDGERFLOW_APPLICATION_WORK_LIMIT", "100")
    make_due(eng)
    run_jobs(eng)
    assert instance(eng, step(eng, NS, pid, "child")["child_workflow_id"])["state"] == "RUNNING"
