"""W-SIG on a live server: field rules, contract, early / consumed / stale / future / expired / limit,
exact correlation (trailing spaces), receipts replayed after a new activation, history pages."""

from __future__ import annotations

import pytest

from ledgerflow.client import InvalidArgument, LimitExceeded, StateConflict
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ENGINE_WORKER_ENV, ops, sql, until  # noqa: F401

DOC = {
    "signals": [
        {
            "name": "done",
            "payload_version": "v1",
            "schema": {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}},
        }
    ],
    "steps": [
        {"key": "prep", "kind": "TASK", "queue": "q1", "after": []},
        {
            "key": "receipt",
            "kind": "SIGNAL",
            "after": ["prep"],
            "signal": "done",
            "payload_version": "v1",
            "correlation": "$.input.order",
            "timeout_seconds": 300,
        },
    ],
    "output": {"receipt": "$.steps.receipt.output"},
}


DOC_MORE = {
    **DOC,
    "steps": [*DOC["steps"], {"key": "ship", "kind": "TASK", "queue": "q2", "after": ["receipt"]}],
}


def _signal(c, wid, seq=1, corr="A-1 ", payload=None, **kw):
    return c.send_workflow_signal(
        wid,
        name=kw.pop("name", "done"),
        payload_version="v1",
        target_step_key=kw.pop("step", "receipt"),
        target_activation_sequence=seq,
        correlation_key=corr,
        payload={"ok": True, "n": 9007199254740993} if payload is None else payload,
        reason=kw.pop("reason", "verified the receipt"),
        **kw,
    )


def _prep_done(ops, wid) -> None:  # noqa: F811
    [t] = [t for t in ops.worker.claim_tasks(["q1"], max_tasks=16) if t.workflow_id == wid]
    ops.worker.complete_task(t.id, t.epoch, {"prepared": True})


def test_early_signal_is_consumed_on_activation_and_future_is_refused(ops):  # noqa: F811
    c = ops.client
    wid = ops.start(ops.define(DOC), {"order": "A-1 "})
    early = _signal(c, wid, evidence_ref="evidence:receipt-001", idempotency_key="sig-early")
    s = early.signal
    assert not early.deduplicated and s.state == "PENDING" and s.target_activation_sequence == 1
    assert (
        s.actor_id == ops.actor_id
        and s.correlation_key == "A-1 "
        and s.evidence_ref == "evidence:receipt-001"
    )
    assert s.payload["n"] == 9007199254740993 and s.revision == 1 and s.disposition is None
    assert s.expires_at == c.get_workflow(wid).deadline_at  # waits for the first activation at most that long
    with pytest.raises(StateConflict):
        _signal(c, wid, seq=2)  # a future activation
    _prep_done(ops, wid)  # the SIGNAL step activates and takes the early signal
    got = c.get_workflow_signal(wid, s.id)
    step = c.get_workflow_step(wid, "receipt")
    assert got.state == "CONSUMED" and got.consumed_wait_id == step.wait["id"] and got.revision == 2
    assert step.wait["winner_signal_id"] == s.id and step.wait["state"] == "RESOLVED"
    assert step.step.state == "SUCCEEDED" and step.output == {"ok": True, "n": 9007199254740993}
    inst = c.get_workflow(wid)
    assert inst.state == "SUCCEEDED" and inst.output == {"receipt": {"ok": True, "n": 9007199254740993}}
    replay = _signal(c, wid, evidence_ref="evidence:receipt-001", idempotency_key="sig-early")
    assert replay.deduplicated and replay.signal.state == "PENDING"  # the first-acceptance snapshot
    with pytest.raises(StateConflict):
        _signal(c, wid)  # the workflow finished


def test_correlation_is_exact_and_contract_is_enforced(ops):  # noqa: F811
    c = ops.client
    wid = ops.start(ops.define(DOC_MORE), {"order": "A-1 "})
    _prep_done(ops, wid)
    for bad in ({"ok": "yes"}, {}, None):
        with pytest.raises(InvalidArgument):
            _signal(c, wid, payload=bad if bad is not None else ["not", "an", "object"])
    with pytest.raises(InvalidArgument) as e:
        _signal(c, wid, name="other")
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(InvalidArgument):
        _signal(c, wid, step="prep")  # a TASK does not wait for signals
    wrong = _signal(c, wid, corr="A-1").signal  # no trailing space
    assert wrong.state == "REJECTED" and wrong.disposition == "CORRELATION_MISMATCH"
    right = _signal(c, wid, corr="A-1 ").signal
    assert right.state == "CONSUMED"
    late = _signal(c, wid).signal  # the wait already has its winner
    assert late.state == "REJECTED" and late.disposition == "WAIT_CLOSED"
    page1 = c.list_workflow_signals(wid, limit=2)
    assert [s.id for s in page1.items] == [late.id, right.id] and page1.next_cursor
    page2 = c.list_workflow_signals(wid, limit=2, cursor=page1.next_cursor)
    assert [s.id for s in page2.items] == [wrong.id] and page2.next_cursor is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("reason", "   "),
        ("reason", "a\u0000b"),
        ("reason", "x" * 1025),
        ("evidence_ref", "has space"),
        ("evidence_ref", "x" * 513),
        ("correlation_key", ""),
        ("correlation_key", "é" * 257),
        ("target_activation_sequence", 0),
        ("target_activation_sequence", True),
        ("target_activation_sequence", 2**32),
        ("name", "bad name"),
        ("payload_version", "v" * 33),
        ("target_step_key", "k" * 65),
    ],
)
def test_signal_field_rules(ops, field, value):  # noqa: F811
    body = {
        "name": "done",
        "payload_version": "v1",
        "target_step_key": "receipt",
        "target_activation_sequence": 1,
        "correlation_key": "A-1 ",
        "payload": {"ok": True},
        "reason": "r",
        field: value,
    }
    with pytest.raises(InvalidArgument) as e:
        ops.client.request("POST", f"/v1/workflows/{'0' * 32}/signals", body=body)
    assert any(err["field"] == field for err in e.value.errors)


def test_expired_signal_and_limit(ops, spawn_worker, monkeypatch):  # noqa: F811
    c = ops.client
    wid = ops.start(ops.define(DOC), {"order": "A-1 "})
    first = _signal(c, wid, idempotency_key="lim-1").signal
    # the early signal's expiry is enforced by a ledger delay_wake job: drive time through the database
    sql("UPDATE workflow_signals SET expires_at = now() WHERE id = :s", s=first.id)
    sql("UPDATE workflow_jobs SET run_at = now() WHERE payload->>'signal_id' = :s", s=first.id)
    spawn_worker("advance", env=ENGINE_WORKER_ENV)
    expired = until(lambda: (g := c.get_workflow_signal(wid, first.id)).state == "EXPIRED" and g)
    assert expired.revision == 2
    monkeypatch.setenv("LEDGERFLOW_SIGNAL_LIMIT", "2")
    _signal(c, wid, idempotency_key="lim-2")
    with pytest.raises(LimitExceeded) as e:
        _signal(c, wid, idempotency_key="lim-3")
    assert e.value.code == "WORKFLOW_SIGNAL_LIMIT" and e.value.status == 409
    replay = _signal(c, wid, idempotency_key="lim-1")  # a stored receipt comes before the limit check
    assert replay.deduplicated and replay.signal.id == first.id


def test_signal_resource_audit_has_its_own_paginated_route(ops):  # noqa: F811
    """X-HIST: the signal-resource audit (acceptance by the sender with reason / evidence_ref, then
    consumption / rejection by the engine) is read through its own route, cursor-bound like W-AUDIT;
    the workflow operations list does not carry it (W-AUDIT-3)."""
    from ledgerflow.client import NotFound

    c = ops.client
    wid = ops.start(ops.define(DOC_MORE), {"order": "A-1 "})
    other = ops.start(ops.define(DOC_MORE), {"order": "A-1 "})
    _prep_done(ops, wid)
    wrong = _signal(c, wid, corr="A-1", evidence_ref="evidence:w").signal
    right = _signal(c, wid, evidence_ref="evidence:r", reason="receipt checked").signal
    page = c.list_signal_operations_page(wid, limit=3)
    assert len(page.items) == 3 and page.next_cursor and len(page.next_cursor) <= 1024
    rest = c.list_signal_operations_page(wid, limit=3, cursor=page.next_cursor)
    items = page.items + rest.items
    assert rest.next_cursor is None
    assert [(o.action, o.signal_id) for o in items] == [
        ("signal.consumed", right.id),
        ("signal.accepted", right.id),
        ("signal.rejected", wrong.id),
        ("signal.accepted", wrong.id),
    ]
    assert items[1].actor_id == ops.actor_id and items[0].actor_id == "system:engine"
    accepted = c.get_signal_operation(wid, items[1].id)
    assert accepted.reason == "receipt checked" and accepted.evidence_ref == "evidence:r"
    assert accepted.after["state"] == "PENDING" and accepted.after["id"] == right.id
    consumed = c.get_signal_operation(wid, items[0].id)
    assert consumed.before == {"state": "PENDING"} and consumed.after["consumed_wait_id"]
    rejected = c.get_signal_operation(wid, items[2].id)
    assert rejected.after["disposition"] == "CORRELATION_MISMATCH"
    only = list(c.list_signal_operations(wid, signal_id=wrong.id, page_size=1))
    assert [o.action for o in only] == ["signal.rejected", "signal.accepted"]
    # cursor binding: another workflow, another query kind, another filter → 400
    with pytest.raises(InvalidArgument):
        c.list_signal_operations_page(other, cursor=page.next_cursor)
    with pytest.raises(InvalidArgument):
        c.list_workflow_operations_page(wid, cursor=page.next_cursor)
    with pytest.raises(InvalidArgument):
        c.list_signal_operations_page(wid, signal_id=right.id, cursor=page.next_cursor)
    with pytest.raises(InvalidArgument):
        c.list_signal_operations_page(wid, signal_id="not-hex")
    # the workflow resource's audit does not list signal rows, nor read them
    assert not [o for o in c.list_workflow_operations(wid) if o.action.startswith("signal.")]
    with pytest.raises(NotFound):
        c.get_workflow_operation(wid, items[1].id)
    step_op = next(o for o in c.list_workflow_operations(wid) if o.action == "workflow.step.succeeded")
    with pytest.raises(NotFound):
        c.get_signal_operation(wid, step_op.id)
    reader = ops.ns.client("start_only")  # workflows:read only: no audit read
    from ledgerflow.client import PermissionDenied

    with pytest.raises(PermissionDenied):
        reader.list_signal_operations_page(wid)
