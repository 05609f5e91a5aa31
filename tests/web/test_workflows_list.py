"""GET /v1/workflows: filters, opaque cursors bound to namespace + filters, limits; W-STEP views."""

from __future__ import annotations

import uuid

import httpx
import pytest

from ledgerflow.client import InvalidArgument, NotFound
from tests.web.wf_live import make_namespace, wf_ns, wf_server  # noqa: F401

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {
            "key": "z_sig",
            "kind": "SIGNAL",
            "signal": "done",
            "payload_version": "v1",
            "correlation": "$.business_key",
            "timeout_seconds": 30,
        },
        {"key": "a_timer", "kind": "TIMER", "delay_seconds": 300},
    ],
    "signals": [{"name": "done", "payload_version": "v1", "schema": {"type": "object"}}],
}


def test_list_filters_and_cursor(wf_ns, wf_server):  # noqa: F811
    c = wf_ns.client()
    d = c.create_definition("list-" + uuid.uuid4().hex[:6])
    c.publish_version(d["id"], DOC)
    ids = [
        c.start_workflow(d["id"], "v1", {"i": i}, business_key=f"order-{i} ").instance.id for i in range(5)
    ]
    page1 = c.list_workflows(limit=2, definition_id=d["id"])
    assert [i.id for i in page1.items] == ids[::-1][:2] and page1.next_cursor
    page2 = c.list_workflows(limit=2, definition_id=d["id"], cursor=page1.next_cursor)
    page3 = c.list_workflows(limit=2, definition_id=d["id"], cursor=page2.next_cursor)
    assert [i.id for i in page2.items + page3.items] == ids[::-1][2:] and page3.next_cursor is None
    with pytest.raises(InvalidArgument) as e:  # the cursor is bound to its filters
        c.list_workflows(limit=2, state="WAITING", cursor=page1.next_cursor)
    assert e.value.errors[0]["field"] == "cursor"
    other = make_namespace(wf_server)
    with pytest.raises(InvalidArgument):  # ... and to its namespace
        other.client().list_workflows(limit=2, definition_id=d["id"], cursor=page1.next_cursor)
    assert other.client().list_workflows().items == []
    with pytest.raises(NotFound):
        other.client().get_workflow(ids[0])
    assert [i.id for i in c.list_workflows(business_key="order-3 ").items] == [ids[3]]
    assert c.list_workflows(business_key="order-3").items == []  # exact, trailing space kept
    assert len(c.list_workflows(business_key_prefix="order-").items) == 5
    assert len(c.list_workflows(state="WAITING", paused=False, version="v1").items) == 5
    assert c.list_workflows(state="SUCCEEDED").items == []
    first = c.get_workflow(ids[0])
    after = first.created_at.isoformat().replace("+00:00", "Z")
    assert ids[0] in [i.id for i in c.list_workflows(created_after=after).items]
    for bad in (
        {"limit": 0},
        {"limit": 101},
        {"state": "DONE"},
        {"created_after": "yesterday"},
        {"deadline_before": "2026-13-45T99:00:00Z"},
        {"colour": "x"},
    ):
        r = httpx.get(
            wf_ns.url + "/v1/workflows",
            params=bad,
            headers={"Authorization": f"Bearer {wf_ns.tokens['all']}"},
        )
        assert r.status_code == 400, (bad, r.text)


def test_step_views_signal_and_timer(wf_ns):  # noqa: F811
    c = wf_ns.client()
    d = c.create_definition("views-" + uuid.uuid4().hex[:6])
    c.publish_version(d["id"], DOC)
    wid = c.start_workflow(d["id"], "v1", {}, business_key="operation-001 ").instance.id
    steps = c.get_workflow_steps(wid)
    assert [s.key for s in steps.steps] == ["a_timer", "z_sig"]  # sorted by key, no root step
    assert steps.revision == c.get_workflow(wid).revision
    sig = c.get_workflow_step(wid, "z_sig")
    assert sig.step.state == "WAITING" and sig.step.activation_sequence == 1
    assert sig.input == {"name": "done", "payload_version": "v1", "correlation": "operation-001 "}
    w = sig.wait
    assert (
        w["kind"] == "SIGNAL"
        and w["state"] == "WAITING"
        and w["name"] == "done"
        and w["payload_version"] == "v1"
    )
    assert w["correlation_key"] == "operation-001 " and "winner_signal_id" not in w and "resolved_at" not in w
    timer = c.get_workflow_step(wid, "a_timer")
    assert (
        timer.wait["kind"] == "TIMER" and "name" not in timer.wait and timer.input == {"delay_seconds": 300}
    )
    with pytest.raises(NotFound):
        c.get_workflow_step(wid, "nope")
    with pytest.raises(NotFound):
        c.get_workflow("not-hex")
