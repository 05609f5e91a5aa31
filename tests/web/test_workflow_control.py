"""W-CTL + L-PAUSE on a live server: pause keeps a TIMER's remainder, resume does not extend the
deadline, pause gates claims and activations while in-flight results are collected, stale control
revisions, frozen replays; cancel waits for an in-flight task, compensates in reverse completion order
(real `ledgerflow worker --pool outbound`) and ends CANCELLED."""

from __future__ import annotations

import pytest

from ledgerflow.client import InvalidArgument, StateConflict
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ENGINE_WORKER_ENV, ops, sql, until  # noqa: F401


def test_pause_keeps_timer_remainder_and_resume_does_not_extend_deadline(ops, spawn_worker):  # noqa: F811
    c = ops.client
    wid = ops.start(
        ops.define(
            {
                "steps": [
                    {"key": "cool", "kind": "TIMER", "after": [], "delay_seconds": 30},
                    {"key": "next", "kind": "TASK", "queue": "q1", "after": ["cool"]},
                ]
            }
        )
    )
    inst = c.get_workflow(wid)
    assert inst.control_revision == 1 and inst.state == "WAITING"
    deadline = inst.deadline_at
    paused = c.control_workflow(wid, "PAUSE", 1, "maintenance window", idempotency_key="p-1")
    assert paused.instance.paused and paused.instance.control_revision == 2 and not paused.deduplicated
    [(status, remaining)] = sql(
        "SELECT status, remaining_ms FROM workflow_jobs WHERE instance_id = :i AND payload->>'wake' = 'timer'",
        i=wid,
    )
    assert status == "paused" and 28_500 <= remaining <= 30_000
    # the instance's watch (its one task_timeout job) enforces the deadline: paused with it
    [(dl_status,)] = sql(
        "SELECT status FROM workflow_jobs WHERE instance_id = :i AND type = 'task_timeout'", i=wid
    )
    assert dl_status == "paused"
    # stale decision → 409; the original key replays the first frozen decision
    with pytest.raises(StateConflict) as e:
        c.control_workflow(wid, "RESUME", 1, "old read")
    assert e.value.code == "STATE_CONFLICT"
    replay = c.control_workflow(wid, "PAUSE", 1, "maintenance window", idempotency_key="p-1")
    assert replay.deduplicated and replay.instance.control_revision == 2
    with pytest.raises(StateConflict):
        c.control_workflow(wid, "PAUSE", 2, "twice")
    sql("SELECT pg_sleep(0.6)")
    resumed = c.control_workflow(wid, "RESUME", 2, "window over")
    assert not resumed.instance.paused and resumed.instance.control_revision == 3
    [(run_in_ms, run_at, dl_run_at)] = sql(
        "SELECT extract(epoch FROM j.run_at - now()) * 1000, j.run_at, "
        "(SELECT run_at FROM workflow_jobs WHERE instance_id = :i AND type = 'task_timeout') "
        "FROM workflow_jobs j WHERE j.instance_id = :i AND j.payload->>'wake' = 'timer'",
        i=wid,
    )
    assert abs(float(run_in_ms) - remaining) < 300  # exactly the saved remainder (poll tolerance)
    wait = c.get_workflow_step(wid, "cool").wait
    assert wait["deadline_at"] == run_at.isoformat(timespec="microseconds").replace("+00:00", "Z")
    after = c.get_workflow(wid)
    assert after.deadline_at == deadline and dl_run_at == deadline  # the deadline is not extended
    # background progress changes revision, never control_revision: the timer fires (time via the DB)
    sql(
        "UPDATE workflow_jobs SET run_at = now() WHERE instance_id = :i AND payload->>'wake' = 'timer'", i=wid
    )
    sql("UPDATE workflow_waits SET deadline_at = now() WHERE instance_id = :i", i=wid)
    spawn_worker("advance", env=ENGINE_WORKER_ENV)
    until(lambda: c.get_workflow_step(wid, "next").step.state == "ACTIVE")
    final = c.get_workflow(wid)
    assert final.control_revision == 3 and final.revision > after.revision
    with pytest.raises(InvalidArgument):
        c.control_workflow(wid, "PAUSE", 0, "zero revision")


def test_pause_gates_claims_and_activations_but_collects_results(ops):  # noqa: F811
    c, w = ops.client, ops.worker
    wid = ops.start(
        ops.define(
            {
                "steps": [
                    {"key": "a", "kind": "TASK", "queue": "q1", "after": []},
                    {"key": "b", "kind": "TASK", "queue": "q2", "after": []},
                    {"key": "c", "kind": "TASK", "queue": "q1", "after": ["a"]},
                ]
            }
        )
    )
    [a] = w.claim_tasks(["q1"])
    c.control_workflow(wid, "PAUSE", 1, "hold")
    assert w.claim_tasks(["q1", "q2"]) == []  # b is not granted while paused
    done = w.complete_task(a.id, a.epoch, {"ok": True})  # the in-flight result is still collected
    assert done.state == "COMPLETED"
    steps = {s.key: s for s in c.get_workflow_steps(wid).steps}
    assert steps["a"].state == "SUCCEEDED" and steps["c"].state == "BLOCKED"  # no new activation
    c.control_workflow(wid, "RESUME", 2, "go on")
    steps = {s.key: s for s in c.get_workflow_steps(wid).steps}
    assert steps["c"].state == "ACTIVE"
    claimed = {t.step_key for t in w.claim_tasks(["q1", "q2"], max_tasks=4)}
    assert claimed == {"b", "c"}


def test_cancel_waits_for_in_flight_task_then_compensates_in_reverse(ops, spawn_worker):  # noqa: F811
    c, w = ops.client, ops.worker
    undo = {"queue": "undo"}
    wid = ops.start(
        ops.define(
            {
                "steps": [
                    {"key": "a", "kind": "TASK", "queue": "q1", "after": [], "compensation": undo},
                    {"key": "b", "kind": "TASK", "queue": "q1", "after": ["a"], "compensation": undo},
                    {"key": "c", "kind": "TASK", "queue": "q1", "after": ["b"], "compensation": undo},
                    {"key": "d", "kind": "TASK", "queue": "q1", "after": ["c"]},
                ]
            }
        )
    )
    for key in ("a", "b"):
        [t] = w.claim_tasks(["q1"])
        assert t.step_key == key
        w.complete_task(t.id, t.epoch, {"done": key})
    [in_flight] = w.claim_tasks(["q1"])
    assert in_flight.step_key == "c"
    res = c.control_workflow(wid, "CANCEL", 1, "customer withdrew the order")
    inst = res.instance
    assert inst.state == "CANCELLING" and inst.stop_kind == "CANCEL" and inst.control_revision == 2
    assert inst.cancel_requested_at and inst.stop_requested_at and inst.completed_at is None
    assert (
        sql(
            "SELECT count(*) FROM workflow_jobs WHERE instance_id = :i AND type = 'compensation_action'",
            i=wid,
        )[0][0]
        == 0
    )
    assert w.heartbeat_task(in_flight.id, in_flight.epoch).state == "CLAIMED"  # the permit is kept
    with pytest.raises(StateConflict):
        c.control_workflow(wid, "CANCEL", 2, "again")
    w.complete_task(in_flight.id, in_flight.epoch, {"done": "c"})  # it really ended
    settling = c.get_workflow(wid)
    assert settling.state == "CANCELLING" and settling.completed_at is None  # compensations first
    steps = {s.key: s.state for s in c.get_workflow_steps(wid).steps}
    assert steps == {"a": "SUCCEEDED", "b": "SUCCEEDED", "c": "SUCCEEDED", "d": "BLOCKED"}
    spawn_worker("outbound", env=ENGINE_WORKER_ENV)  # a real worker issues the compensation tasks

    def comp_tasks() -> list:
        return sql(
            "SELECT step_key, state FROM workflow_tasks WHERE instance_id = :i AND purpose = 'COMPENSATION' "
            "ORDER BY created_at",
            i=wid,
        )

    completed = []
    for key in ("c", "b", "a"):  # reverse completion order, one at a time
        until(lambda n=len(completed): len(comp_tasks()) == n + 1)
        sql("SELECT pg_sleep(0.5)")  # > 2 poll periods of the worker: nothing else may be issued
        assert comp_tasks() == [*[(k, "COMPLETED") for k in completed], (key, "PENDING")]
        assert c.get_workflow(wid).state == "CANCELLING"
        [undo] = w.claim_tasks(["undo"], max_tasks=3)
        assert undo.input["compensate"] == key and undo.input["order"] == len(completed) + 1
        assert undo.input["output"] == {"done": key} and undo.workflow_id == wid
        w.complete_task(undo.id, undo.epoch, {"undone": key})
        completed.append(key)
    final = c.get_workflow(wid)  # CANCELLED only after the last compensation completed
    assert final.state == "CANCELLED" and final.completed_at is not None and final.stop_kind == "CANCEL"
    jobs = sql(
        "SELECT status, payload->>'index' FROM workflow_jobs WHERE instance_id = :i AND type = 'compensation_action' "
        "ORDER BY id",
        i=wid,
    )
    assert [(s, int(i)) for s, i in jobs] == [("succeeded", 0), ("succeeded", 1), ("succeeded", 2)]
    actions = [o.action for o in c.list_workflow_operations(wid)]
    assert actions.count("workflow.compensation.issued") == 3 and "workflow.control.cancel" in actions
    assert actions.count("workflow.compensation.completed") == 3 and actions[0] == "workflow.cancelled"


def test_cancel_without_in_flight_work_ends_at_once_and_clears_jobs(ops):  # noqa: F811
    c = ops.client
    wid = ops.start(ops.define({"steps": [{"key": "t", "kind": "TIMER", "after": [], "delay_seconds": 60}]}))
    inst = c.control_workflow(wid, "CANCEL", 1, "not needed").instance
    assert inst.state == "CANCELLED" and inst.completed_at and inst.stop_kind == "CANCEL"
    statuses = {r[0] for r in sql("SELECT status FROM workflow_jobs WHERE instance_id = :i", i=wid)}
    assert statuses == {"canceled"}, sql(
        "SELECT type, status, payload::text FROM workflow_jobs WHERE instance_id = :i", i=wid
    )
    assert c.get_workflow_step(wid, "t").wait["state"] == "CANCELLED"
    with pytest.raises(StateConflict):
        c.control_workflow(wid, "RESUME", 2, "too late")
