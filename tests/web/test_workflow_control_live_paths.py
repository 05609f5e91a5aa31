"""Live paths of control and signals that had no test: a POLL ended early by its final signal and signal vs final
poll result (W-SIG-5: the first event wins; a PENDING poll does not contend), a cancel passing on to a
running child workflow, and the ``cancel_settle`` re-check when an in-flight task's lease runs out —
on a live server with real ``ledgerflow worker`` processes; time is driven through the database."""

from __future__ import annotations

import pytest

from ledgerflow.client import StateConflict
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ENGINE_WORKER_ENV, ops, sql, until  # noqa: F401

POLL_DOC = {
    "signals": [{"name": "done", "payload_version": "v1", "schema": {"type": "object"}}],
    "steps": [
        {
            "key": "check",
            "kind": "POLL",
            "queue": "pq",
            "after": [],
            "interval_ms": 1000,
            "max_rounds": 3,
            "max_attempts_per_round": 1,
            "final_signal": {"signal": "done", "payload_version": "v1"},
        },
        {"key": "ship", "kind": "TASK", "queue": "sq", "after": ["check"]},
    ],
}


def _final(c, wid, payload):
    return c.send_workflow_signal(
        wid,
        name="done",
        payload_version="v1",
        target_step_key="check",
        target_activation_sequence=1,
        correlation_key="any",
        payload=payload,
        reason="final status from the receiver",
    ).signal


def _round_task(ops, wid):  # noqa: F811
    return next(t for t in ops.worker.claim_tasks(["pq"], max_tasks=16) if t.workflow_id == wid)


def test_final_signal_ends_a_poll_early_and_the_first_event_wins(ops):  # noqa: F811
    c, w = ops.client, ops.worker
    def_id = ops.define(POLL_DOC)
    # 1. a PENDING round does not contend: the signal wins, the queued round is canceled
    early = ops.start(def_id)
    sig = _final(c, early, {"status": "delivered"})
    assert sig.state == "CONSUMED"
    view = c.get_workflow_step(early, "check")
    assert view.step.state == "SUCCEEDED" and view.output == {"status": "delivered"}
    assert view.wait["winner_signal_id"] == sig.id and view.poll["used_rounds"] == 0
    assert [r["state"] for r in c.list_step_rounds(early, "check").items] == ["CANCELLED"]
    assert c.get_workflow_step(early, "ship").step.state == "ACTIVE"  # the successor starts
    # 2. a claimed round is in flight, the signal comes first: it wins; the late result changes nothing
    racing = ops.start(def_id)
    in_flight = _round_task(ops, racing)
    assert _final(c, racing, {"status": "signal first"}).state == "CONSUMED"
    late = w.complete_task(in_flight.id, in_flight.epoch, {"done": True, "status": "poll second"})
    assert late.state == "COMPLETED"  # its permit was kept until it really ended
    view = c.get_workflow_step(racing, "check")
    assert view.output == {"status": "signal first"} and view.step.activation_sequence == 1
    # 3. the final poll result comes first: the signal that follows is REJECTED (WAIT_CLOSED)
    polled = ops.start(def_id)
    first = _round_task(ops, polled)
    w.complete_task(first.id, first.epoch, {"done": True, "status": "poll first"})
    loser = _final(c, polled, {"status": "signal second"})
    assert loser.state == "REJECTED" and loser.disposition == "WAIT_CLOSED"
    view = c.get_workflow_step(polled, "check")
    assert view.output == {"done": True, "status": "poll first"} and "winner_signal_id" not in view.wait
    assert view.wait["state"] == "RESOLVED"


CHILD = {"steps": [{"key": "work", "kind": "TASK", "queue": "kq", "after": []}]}


def test_cancel_passes_on_to_a_running_child(ops, spawn_worker):  # noqa: F811
    c, w = ops.client, ops.worker
    child_def = ops.define(CHILD)
    pid = ops.start(
        ops.define(
            {
                "steps": [
                    {
                        "key": "child",
                        "kind": "SUBWORKFLOW",
                        "after": [],
                        "definition_id": child_def,
                        "version": "v1",
                    },
                    {"key": "after", "kind": "TASK", "queue": "sq", "after": ["child"]},
                ]
            }
        )
    )
    spawn_worker("advance", env=ENGINE_WORKER_ENV)  # runs subprocess_spawn
    cid = until(lambda: c.get_workflow_step(pid, "child").child_workflow_id)
    [kid_task] = w.claim_tasks(["kq"])
    assert kid_task.workflow_id == cid
    parent = c.control_workflow(pid, "CANCEL", 1, "order withdrawn").instance
    assert parent.state == "CANCELLED"  # the parent's own work had no in-flight task
    child = c.get_workflow(cid)
    assert child.state == "CANCELLING" and child.stop_kind == "CANCEL" and child.cancel_requested_at
    cause = [o for o in c.list_workflow_operations(cid) if o.action == "workflow.control.cancel"]
    assert cause and c.get_workflow_operation(cid, cause[0].id).after["parent"] == pid
    w.complete_task(kid_task.id, kid_task.epoch, {"ok": True})  # the child's permit ran to its end
    assert c.get_workflow(cid).state == "CANCELLED"
    # the child's subprocess_join reaches a finished parent: nothing changes there
    until(
        lambda: (
            sql(
                "SELECT status FROM workflow_jobs WHERE type = 'subprocess_join' AND payload->>'child_id' = :c",
                c=cid,
            )
            in ([("succeeded",)], [("canceled",)])
        )
    )
    assert c.get_workflow(pid).state == "CANCELLED"
    assert c.get_workflow_step(pid, "after").step.state == "BLOCKED"


def test_cancel_settles_when_the_in_flight_lease_runs_out(ops, spawn_worker):  # noqa: F811
    c, w = ops.client, ops.worker
    wid = ops.start(ops.define({"steps": [{"key": "t", "kind": "TASK", "queue": "lq", "after": []}]}))
    [task] = w.claim_tasks(["lq"])
    assert c.control_workflow(wid, "CANCEL", 1, "stop").instance.state == "CANCELLING"
    [(settle_at, lease)] = sql(
        "SELECT j.run_at, t.lease_expires_at FROM workflow_jobs j, workflow_tasks t WHERE j.instance_id = :i "
        "AND j.payload->>'wake' = 'cancel_settle' AND t.id = :t",
        i=wid,
        t=task.id,
    )
    assert settle_at == lease  # the re-check is due exactly when the permit's lease runs out
    # the worker vanished: its lease runs out (time through the database)
    sql("UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 ms' WHERE id = :t", t=task.id)
    sql(
        "UPDATE workflow_jobs SET run_at = now() WHERE instance_id = :i AND payload->>'wake' = 'cancel_settle'",
        i=wid,
    )
    assert w.claim_tasks(["lq"]) == []  # never handed out again while the cancel settles
    spawn_worker("advance", env=ENGINE_WORKER_ENV)
    until(lambda: c.get_workflow(wid).state == "CANCELLED")
    assert w.get_task(task.id).state == "CANCELLED"
    with pytest.raises(StateConflict):
        w.complete_task(task.id, task.epoch, {"too": "late"})
