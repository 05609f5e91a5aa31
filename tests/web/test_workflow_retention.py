"""Retention of finished workflows (docs/reference.md, "Retention of finished workflows"), on a live
server: a finished workflow past its namespace's retention is removed with its steps, activations, tasks,
waits, signals and events (the event batches carrying audit entries stay for the audit's retention); a
held one, an unfinished one and one still within its retention are never touched; what every route
answers afterwards; the preview of what goes next; a resent start after removal."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from app.db import transaction
from app.engine import retention
from ledgerflow.client import InvalidArgument, NotFound
from tests.web.test_workflow_control_signals import DOC, _prep_done, _signal
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ops, sql  # noqa: F401

TABLES = (
    "workflow_steps",
    "workflow_activations",
    "workflow_tasks",
    "workflow_signals",
    "workflow_instances",
)
POLICY = retention.WorkflowRetention(days=30.0)


def _finished(ops, def_id: str, key: str | None = None) -> str:  # noqa: F811
    wid = ops.client.start_workflow(def_id, "v1", {"order": "A-1 "}, idempotency_key=key).instance.id
    _signal(ops.client, wid)  # early: taken when the SIGNAL step activates
    _prep_done(ops, wid)
    assert ops.client.get_workflow(wid).state == "SUCCEEDED"
    return wid


def _rows(wid: str) -> dict[str, int]:
    out = {
        t: sql(
            f"SELECT count(*) FROM {t} WHERE {'id' if t == 'workflow_instances' else 'instance_id'} = :i",
            i=wid,
        )[0][0]
        for t in TABLES
    }
    out["workflow_waits"] = sql("SELECT count(*) FROM workflow_waits w WHERE w.instance_id = :i", i=wid)[0][0]
    return out


def _age(wid: str, days: float) -> None:
    """The workflow started ``days`` ago, and ended then if it has ended (an unfinished one has no end:
    ``ck_workflow_instances_ended``)."""
    sql(
        "UPDATE workflow_instances SET completed_at = CASE WHEN completed_at IS NOT NULL "
        "THEN now() - make_interval(secs => :d * 86400) END, "
        "created_at = now() - make_interval(secs => :d * 86400) WHERE id = :i",
        i=wid,
        d=days,
    )


def _prune() -> int:
    removed = 0
    while True:
        with transaction() as conn:
            n = retention.prune_workflows(conn, 100, policy=POLICY)
        removed += n
        if n == 0:
            return removed


def _hold(ops, wid: str, until: str | None):  # noqa: F811
    return ops.client.request(
        "POST", f"/v1/workflows/{wid}/hold", body={"hold_until": until, "reason": "legal hold for case 42"}
    )["data"]


def test_finished_workflows_past_retention_go_and_nothing_else_is_touched(ops):  # noqa: F811
    def_id = ops.define(DOC)
    key = "start-" + uuid.uuid4().hex
    old = _finished(ops, def_id, key)
    held = _finished(ops, def_id)
    recent = _finished(ops, def_id)
    waiting = ops.start(def_id, {"order": "A-1 "})
    _prep_done(ops, waiting)  # WAITING for its signal: unfinished
    for wid in (old, held, waiting):
        _age(wid, 31)
    until = (datetime.now(UTC) + timedelta(days=10)).replace(microsecond=0)
    h = _hold(ops, held, until.isoformat().replace("+00:00", "Z"))
    assert h["workflow_id"] == held and h["operation_id"] and h["removes_at"] == h["hold_until"]
    before = {wid: _rows(wid) for wid in (old, held, recent, waiting)}
    assert all(before[old][t] >= 1 for t in ("workflow_steps", "workflow_tasks", "workflow_signals"))
    audit_batches = sql(
        "SELECT count(*) FROM workflow_event_batches WHERE instance_id = :i AND audit_json IS NOT NULL", i=old
    )[0][0]

    # the preview: the old one first; the held one is not next
    with transaction() as conn:
        preview = retention.next_removals(conn, _ns_id(ops), 10, POLICY)
    ids = [i["workflow_id"] for i in preview["items"]]
    assert ids[0] == old and held not in ids and recent in ids and waiting not in ids
    assert preview["retention_days"] == 30.0

    assert _prune() == 1
    assert all(n == 0 for n in _rows(old).values()), _rows(old)
    assert (
        sql("SELECT count(*) FROM workflow_event_batches WHERE instance_id = :i", i=old)[0][0]
        == audit_batches
    )
    for wid in (held, recent, waiting):
        assert _rows(wid) == before[wid], wid

    # what answers for the removed workflow: 404 on every route of it, like any unknown id
    c = ops.client
    for read in (
        lambda: c.get_workflow(old),
        lambda: c.get_workflow_steps(old),
        lambda: c.get_workflow_step(old, "receipt"),
        lambda: c.request("GET", f"/v1/workflows/{old}/signals"),
        lambda: c.request("GET", f"/v1/workflows/{old}/operations"),
        lambda: _hold(ops, old, None),
    ):
        with pytest.raises(NotFound):
            read()
    # its audit stays in the namespace's audit (its own, longer retention)
    assert sql("SELECT count(*) FROM operation_audit WHERE workflow_id = :i", i=old)[0][0] >= 1
    # a start resent with the first start's key (a day later at least: the key has expired) starts anew
    again = c.start_workflow(def_id, "v1", {"order": "A-1 "}, idempotency_key=key)
    assert again.instance.id != old and not again.deduplicated

    # released, the held one goes at the next pass
    released = _hold(ops, held, None)
    assert released["hold_until"] is None and released["removes_at"] is not None
    assert _prune() == 1 and _rows(held)["workflow_instances"] == 0
    assert _rows(recent)["workflow_instances"] == 1 and _rows(waiting)["workflow_instances"] == 1


def _ns_id(ops) -> str:  # noqa: F811
    return sql("SELECT id FROM namespaces WHERE name = :n", n=ops.ns.name)[0][0]


def test_the_retention_preview_and_hold_through_the_api(ops):  # noqa: F811
    def_id = ops.define(DOC)
    wid = _finished(ops, def_id)
    got = ops.client.request("GET", "/v1/retention", params={"limit": "5"})["data"]
    assert got["retention_days"] == 30.0
    [item] = [i for i in got["items"] if i["workflow_id"] == wid]
    assert item["definition_id"] == def_id and item["state"] == "SUCCEEDED" and item["removes_at"]
    with pytest.raises(InvalidArgument) as e:
        _hold(ops, wid, "2999-01-01T00:00:00Z")  # beyond the longest retention
    assert e.value.errors[0]["field"] == "hold_until"
    with pytest.raises(InvalidArgument):
        _hold(ops, wid, "tomorrow")
    running = ops.start(def_id, {"order": "A-1 "})
    h = _hold(ops, running, "2030-01-01T00:00:00Z")  # a hold on a running workflow counts once it ends
    assert h["removes_at"] is None and h["completed_at"] is None
    ops_rows = sql(
        "SELECT action, reason FROM operation_audit WHERE workflow_id = :i AND action = 'workflow.hold'",
        i=running,
    )
    assert ops_rows == [("workflow.hold", "legal hold for case 42")]
