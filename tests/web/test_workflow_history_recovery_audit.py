"""X-RECOVER, X-HIST and W-AUDIT on a live server: an unknown external outcome sends a pause or a
cancel to NEEDS_REVIEW; RESUME keeps it; RETRY_STEP (new activation, no bigger budget; a stale signal
is REJECTED and an old signal key replays its old receipt), SUCCEED_STEP (the cancel then finishes)
and FAIL_STEP; activation / round history; operation audit pages and cursor binding."""

from __future__ import annotations

import pytest

from ledgerflow.client import InvalidArgument, StateConflict
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ops, sql, unknown_outcome_job  # noqa: F401

DOC = {
    "signals": [{"name": "done", "payload_version": "v1", "schema": {"type": "object"}}],
    "steps": [
        {
            "key": "receipt",
            "kind": "SIGNAL",
            "after": [],
            "signal": "done",
            "payload_version": "v1",
            "correlation": "$.input.order",
            "timeout_seconds": 300,
        },
        {"key": "ship", "kind": "TASK", "queue": "q1", "after": ["receipt"]},
    ],
}


def _sig(c, wid, seq, key):
    return c.send_workflow_signal(
        wid,
        name="done",
        payload_version="v1",
        target_step_key="receipt",
        target_activation_sequence=seq,
        correlation_key="A-1",
        payload={"seq": seq},
        reason="receipt checked",
        idempotency_key=key,
    )


def test_pause_with_unknown_outcome_then_retry_step_as_new_activation(ops):  # noqa: F811
    c = ops.client
    wid = ops.start(ops.define(DOC), {"order": "A-1"})
    before_retry = c.send_workflow_signal(  # for activation 1 (its correlation does not match)
        wid,
        name="done",
        payload_version="v1",
        target_step_key="receipt",
        target_activation_sequence=1,
        correlation_key="B-2",
        payload={},
        reason="wrong order",
        idempotency_key="s-before",
    ).signal
    assert before_retry.state == "REJECTED" and before_retry.disposition == "CORRELATION_MISMATCH"
    unknown_outcome_job(wid, "receipt")
    inst = c.control_workflow(wid, "PAUSE", 1, "freeze").instance
    assert inst.state == "NEEDS_REVIEW" and inst.paused
    assert c.get_workflow_step(wid, "receipt").step.state == "NEEDS_REVIEW"
    [(status, code)] = sql(
        "SELECT status, error_code FROM workflow_jobs WHERE type = 'external_dispatch' AND instance_id = :i",
        i=wid,
    )
    assert (status, code) == ("dead", "EXTERNAL_OUTCOME_UNKNOWN")
    inst = c.control_workflow(wid, "RESUME", 2, "unfreeze").instance
    assert inst.state == "NEEDS_REVIEW" and not inst.paused  # RESUME does not clear NEEDS_REVIEW
    first_wait = c.get_workflow_step(wid, "receipt").wait  # its deadline kept the paused remainder
    with pytest.raises(StateConflict):
        c.recover_workflow_step(wid, "RETRY_STEP", "ship", "not in review")
    with pytest.raises(InvalidArgument):
        c.recover_workflow_step(wid, "RETRY_STEP", "receipt", "x", output={"no": "output here"})
    res = c.recover_workflow_step(
        wid,
        "RETRY_STEP",
        "receipt",
        "receiver confirmed nothing arrived",
        evidence_ref="ticket:42",
        idempotency_key="r1",
    )
    assert res.step["activation_sequence"] == 2 and res.instance.state == "WAITING"
    again = c.recover_workflow_step(
        wid,
        "RETRY_STEP",
        "receipt",
        "receiver confirmed nothing arrived",
        evidence_ref="ticket:42",
        idempotency_key="r1",
    )
    assert again.deduplicated and again.step == res.step
    new_wait = c.get_workflow_step(wid, "receipt").wait
    assert (
        new_wait["id"] != first_wait["id"] and new_wait["deadline_at"] <= first_wait["deadline_at"]
    )  # W-STEP-5
    stale = _sig(c, wid, 1, "s-old").signal
    assert stale.state == "REJECTED" and stale.disposition == "STALE_ACTIVATION"
    assert _sig(c, wid, 1, "s-old").signal.id == stale.id  # the old key replays the old receipt
    replay = c.send_workflow_signal(  # a receipt from before the new activation replays unchanged
        wid,
        name="done",
        payload_version="v1",
        target_step_key="receipt",
        target_activation_sequence=1,
        correlation_key="B-2",
        payload={},
        reason="wrong order",
        idempotency_key="s-before",
    )
    assert replay.deduplicated and replay.signal.id == before_retry.id
    assert replay.signal.target_activation_sequence == 1 and replay.signal.state == "REJECTED"
    with pytest.raises(StateConflict):
        _sig(c, wid, 3, "s-future")
    assert _sig(c, wid, 2, "s-new").signal.state == "CONSUMED"
    acts = c.list_step_activations(wid, "receipt", limit=1)
    assert [a["sequence"] for a in acts.items] == [2] and acts.next_cursor
    older = c.list_step_activations(wid, "receipt", cursor=acts.next_cursor)
    assert [a["sequence"] for a in older.items] == [1] and older.items[0]["state"] == "CANCELLED"
    assert older.items[0]["wait"]["id"] == first_wait["id"]
    [ship] = ops.worker.claim_tasks(["q1"])
    ops.worker.fail_task(ship.id, ship.epoch, "boom", retryable=False)
    rounds = c.list_step_rounds(wid, "ship")
    assert [(r["id"], r["state"], r["activation_sequence"]) for r in rounds.items] == [(ship.id, "FAILED", 1)]
    with pytest.raises(InvalidArgument):
        c.list_step_rounds(wid, "ship", cursor=acts.next_cursor)  # a cursor of another query
    ops_by_action = {o.action: o for o in c.list_workflow_operations(wid)}
    retry = c.get_workflow_operation(wid, ops_by_action["workflow.recovery.retry_step"].id)
    assert retry.reason == "receiver confirmed nothing arrived" and retry.evidence_ref == "ticket:42"
    assert retry.actor_id == ops.actor_id and retry.before["state"] == "NEEDS_REVIEW"
    assert retry.after["step"]["activation_sequence"] == 2


def test_cancel_with_unknown_outcome_goes_to_review_then_succeed_step_finishes_it(ops):  # noqa: F811
    c = ops.client
    wid = ops.start(ops.define(DOC), {"order": "A-1"})
    unknown_outcome_job(wid, "receipt")
    inst = c.control_workflow(wid, "CANCEL", 1, "stop it").instance
    assert inst.state == "NEEDS_REVIEW" and inst.cancel_requested_at and inst.stop_kind == "CANCEL"
    [(status,)] = sql(
        "SELECT status FROM workflow_jobs WHERE type = 'external_dispatch' AND instance_id = :i", i=wid
    )
    assert status == "running"  # an unknown outcome is left for the operator, never canceled blindly
    with pytest.raises(StateConflict):
        c.recover_workflow_step(wid, "RETRY_STEP", "receipt", "no retry while cancelling")
    res = c.recover_workflow_step(wid, "SUCCEED_STEP", "receipt", "it arrived", output=None)
    assert res.instance.state == "CANCELLED" and res.instance.completed_at
    step = c.get_workflow_step(wid, "receipt")
    assert step.step.state == "SUCCEEDED" and step.output is None


def test_fail_step_fails_the_workflow(ops):  # noqa: F811
    c = ops.client
    wid = ops.start(ops.define(DOC), {"order": "A-1"})
    unknown_outcome_job(wid, "receipt")
    c.control_workflow(wid, "PAUSE", 1, "freeze")
    res = c.recover_workflow_step(wid, "FAIL_STEP", "receipt", "receiver rejected it")
    assert res.instance.state == "FAILED" and res.instance.stop_kind == "FAILURE"
    assert c.get_workflow_step(wid, "receipt").error["code"] == "FAILED_BY_OPERATOR"


def test_operation_audit_pages_and_cursor_binding(ops):  # noqa: F811
    c = ops.client
    def_id = ops.define({"steps": [{"key": "t", "kind": "TASK", "queue": "q1", "after": []}]})
    wid, other = ops.start(def_id), ops.start(def_id)
    rev = 1
    for op in ("PAUSE", "RESUME", "PAUSE", "RESUME"):
        rev = c.control_workflow(wid, op, rev, f"{op.lower()} for the audit test").instance.control_revision
    [t] = [t for t in ops.worker.claim_tasks(["q1"], max_tasks=4) if t.workflow_id == wid]
    ops.worker.complete_task(t.id, t.epoch, {"ok": True})
    page = c.list_workflow_operations_page(wid, limit=2)
    assert len(page.items) == 2 and page.next_cursor and len(page.next_cursor) <= 1024
    everything = list(c.list_workflow_operations(wid, page_size=3))
    actions = [o.action for o in everything]
    assert actions[0] == "workflow.succeeded" and actions[-1] == "workflow.start"
    assert actions.count("workflow.control.pause") == 2 and "workflow.step.succeeded" in actions
    keys = [(o.created_at, o.id) for o in everything]
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys)
    assert all(o.workflow_id == wid and o.operation_id for o in everything)
    with pytest.raises(InvalidArgument) as e:
        c.list_workflow_operations_page(other, cursor=page.next_cursor)  # another workflow
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(InvalidArgument):
        c.list_workflow_signals(wid, cursor=page.next_cursor)  # another query kind
    for bad in (0, 101):
        with pytest.raises(InvalidArgument):
            c.list_workflow_operations_page(wid, limit=bad)
    pause = next(o for o in everything if o.action == "workflow.control.pause")
    detail = c.get_workflow_operation(wid, pause.id)
    assert detail.reason == "pause for the audit test" and detail.evidence_ref is None
    assert detail.before["paused"] is False and detail.after["paused"] is True
    raw = c.request("GET", f"/v1/workflows/{wid}/operations/{pause.id}")["data"]
    assert "evidence_ref" not in raw and raw["actor_id"] == ops.actor_id
    from ledgerflow.client import NotFound

    with pytest.raises(NotFound):
        c.get_workflow_operation(other, pause.id)


def test_every_activation_is_audited_once_after_the_start(ops):  # noqa: F811
    c = ops.client
    wid = ops.start(ops.define(DOC), {"order": "A-1"})
    unknown_outcome_job(wid, "receipt")
    c.control_workflow(wid, "PAUSE", 1, "freeze")
    c.control_workflow(wid, "RESUME", 2, "thaw")
    c.recover_workflow_step(wid, "RETRY_STEP", "receipt", "nothing arrived")
    _sig(c, wid, 2, "s-2")  # the receipt succeeds: ship activates
    everything = list(c.list_workflow_operations(wid))
    oldest_first = [o.action for o in reversed(everything)]
    assert oldest_first[0] == "workflow.start"  # the start row precedes its first activations
    activated = [o for o in reversed(everything) if o.action == "workflow.step.activated"]
    bodies = [c.get_workflow_operation(wid, o.id).after for o in activated]
    assert [(b["step_key"], b["activation_sequence"]) for b in bodies] == [
        ("receipt", 1),
        ("receipt", 2),
        ("ship", 1),
    ]
    assert all(o.actor_id == "system:engine" for o in activated)
    assert bodies[1]["activation_id"] == c.get_workflow_step(wid, "receipt").step.activation_id


def test_resolve_instance_whose_unknown_outcome_has_no_step(ops):  # noqa: F811
    """X-RECOVER on the instance: a job without a step left the instance in NEEDS_REVIEW with no step
    to resolve; RESOLVE_INSTANCE (workflows:recovery, reason + evidence_ref, audited) unblocks it."""
    from ledgerflow.client import PermissionDenied

    c = ops.client
    wid = ops.start(ops.define(DOC), {"order": "A-1"})
    job = unknown_outcome_job(wid, None)
    inst = c.control_workflow(wid, "PAUSE", 1, "freeze").instance
    assert inst.state == "NEEDS_REVIEW" and c.get_workflow_step(wid, "receipt").step.state == "WAITING"
    c.control_workflow(wid, "RESUME", 2, "thaw")
    assert c.get_workflow(wid).state == "NEEDS_REVIEW"  # stuck: no step is in review
    with pytest.raises(InvalidArgument) as e:
        c.request(
            "POST",
            f"/v1/workflows/{wid}/recovery",
            body={"action": "RESOLVE_INSTANCE", "resolution": "MAYBE", "step_key": "receipt", "reason": "r"},
        )
    assert {err["field"] for err in e.value.errors} == {"resolution", "step_key"}
    reader = ops.ns.client("start_only")  # workflows:read + start, no workflows:recovery
    with pytest.raises(PermissionDenied):
        reader.resolve_workflow_instance(wid, "CONTINUE", "not mine to decide")
    res = c.resolve_workflow_instance(
        wid,
        "CONTINUE",
        "receiver confirmed: nothing was sent",
        evidence_ref="ticket:77",
        idempotency_key="ri-1",
    )
    assert res.instance.state == "WAITING" and not res.deduplicated
    assert res.resolution == {
        "resolution": "CONTINUE",
        "review": "UNKNOWN_OUTCOME",
        "unknown_outcome_jobs": [str(job)],
    }
    again = c.resolve_workflow_instance(
        wid,
        "CONTINUE",
        "receiver confirmed: nothing was sent",
        evidence_ref="ticket:77",
        idempotency_key="ri-1",
    )
    assert again.deduplicated and again.operation_id == res.operation_id
    with pytest.raises(StateConflict):
        c.resolve_workflow_instance(wid, "CONTINUE", "no longer in review")
    op = c.get_workflow_operation(wid, res.operation_id)
    assert op.action == "workflow.recovery.resolve_instance" and op.evidence_ref == "ticket:77"
    assert op.reason == "receiver confirmed: nothing was sent" and op.actor_id == ops.actor_id
    assert op.before["state"] == "NEEDS_REVIEW" and op.after["resolution"]["review"] == "UNKNOWN_OUTCOME"
    assert _sig(c, wid, 1, "s-go").signal.state == "CONSUMED"  # the workflow carries on


def test_resolve_instance_cancel_with_review_pending(ops):  # noqa: F811
    c = ops.client
    wid = ops.start(ops.define(DOC), {"order": "A-1"})
    unknown_outcome_job(wid, None)
    inst = c.control_workflow(wid, "CANCEL", 1, "stop").instance
    assert inst.state == "NEEDS_REVIEW" and inst.cancel_requested_at
    res = c.resolve_workflow_instance(wid, "CANCEL", "checked: no effect", evidence_ref="ticket:78")
    assert res.instance.state == "CANCELLED" and res.instance.stop_kind == "CANCEL"
    other = ops.start(ops.define(DOC), {"order": "A-1"})
    unknown_outcome_job(other, None)
    c.control_workflow(other, "PAUSE", 1, "freeze")
    failed = c.resolve_workflow_instance(other, "FAIL", "the receiver double-booked it")
    assert failed.instance.state == "FAILED" and failed.instance.stop_kind == "FAILURE"
