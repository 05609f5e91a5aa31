"""Event batches in the compact form (issue 50, migration 0031): a batch row stores only what its
transaction changed of the instance, and a start's audit entry does not repeat the response's instance
object; every consumer (the events and operations routes, the views the fan-out reads) still receives
the JSON of the whole form, and a row written in the whole form (before the migration) reads the same."""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import text

from app.auth import ensure_namespace
from app.db import transaction
from app.engine import commit_batch
from tests.db.old_schemas import migration_module
from tests.engine.helpers import claim_task, complete_task, publish

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "a", "kind": "TASK", "queue": "cb.q"},
        {"key": "b", "kind": "TASK", "queue": "cb.q", "after": ["a"]},
    ],
}
SCOPES = ("workflows:start", "workflows:read", "workflows:audit:read", "tasks:submit")
# the states each event leaves the instance in, for the scripted workflow below (one row per transaction)
STATES = [
    ("workflow.started", "RUNNING"),
    ("task.created", "RUNNING"),
    ("step.activated", "RUNNING"),
    ("task.completed", "RUNNING"),
    ("step.succeeded", "RUNNING"),
    ("task.created", "RUNNING"),
    ("step.activated", "RUNNING"),
    ("task.completed", "SUCCEEDED"),
    ("step.succeeded", "SUCCEEDED"),
    ("workflow.succeeded", "SUCCEEDED"),
]


def _migration():
    return migration_module("0031_compact_event_batches")


def _run(clean, sql: str, **params: Any) -> list[Any]:
    with clean.begin() as conn:
        result = conn.execute(text(sql), params)
        return result.all() if result.returns_rows else []


def _scripted(client, token, clean, input_: dict) -> tuple[str, str, dict[str, str], dict]:
    """A keyed start (business key, ``input_``) of TASK -> TASK, both tasks completed: (namespace,
    workflow id, headers, the start's response)."""
    name = "cb-" + uuid.uuid4().hex[:8]
    bearer = token(*SCOPES, namespace=name)
    with transaction(clean) as conn:
        ns = ensure_namespace(conn, name)
    def_id = publish(clean, ns, DOC)
    h = {"Authorization": f"Bearer {bearer}"}
    body = {"definition_id": def_id, "version": "v1", "input": input_, "business_key": "order-7"}
    r = client.post(
        "/v1/workflows",
        data=json.dumps(body),
        content_type="application/json",
        headers={**h, "Idempotency-Key": "k-" + uuid.uuid4().hex},
    )
    assert r.status_code == 201, r.get_data(as_text=True)
    wid = r.get_json()["data"]["instance"]["id"]
    for _ in range(2):
        complete_task(clean, ns, claim_task(clean, ns, "cb.q"), {"ok": True})
    return ns, wid, h, r.get_json()


def _rendered(client, clean, wid: str, h: dict[str, str]) -> dict[str, Any]:
    """Everything a consumer gets of the workflow's events and audit: the routes' pages and details, and
    the views' rows (the fan-out and the automation rules read ``workflow_events``)."""
    events = client.get(f"/v1/workflows/{wid}/events?limit=100", headers=h).get_json()["data"]
    ops = client.get(f"/v1/workflows/{wid}/operations?limit=100", headers=h).get_json()["data"]
    details = [
        client.get(f"/v1/workflows/{wid}/operations/{o['id']}", headers=h).get_json()["data"]
        for o in ops["items"]
    ]
    view = _run(
        clean,
        "SELECT id, batch_id, namespace_id, instance_id, seq, type, definition_id, body::text, dispatch_job_id, "
        "created_at FROM workflow_events WHERE instance_id = :w ORDER BY seq",
        w=wid,
    )
    audit = _run(
        clean,
        "SELECT id, batch_id, namespace_id, actor_id, actor_name, action, target_type, target_id, workflow_id, "
        "operation_id, reason, evidence_ref, request_id, before::text, after::text, created_at "
        "FROM workflow_operations WHERE workflow_id = :w ORDER BY id",
        w=wid,
    )
    return {"events": events, "ops": ops, "details": details, "view": view, "audit": audit}


def test_the_events_and_the_audit_read_as_the_whole_form_from_compact_rows(client, token, clean) -> None:
    ns, wid, h, started = _scripted(client, token, clean, {"n": 1, "f": 1.10, "nested": {"z": 1, "a": [2]}})
    inst = _run(
        clean,
        "SELECT definition_id, version, business_key, trace_id FROM workflow_instances WHERE id = :w",
        w=wid,
    )[0]
    # stored compact: the state and the paused flag, no ids; the start entry points at the response
    rows = _run(
        clean,
        "SELECT definition_id, trace_id, instance, CAST(events_json AS jsonb) AS events, "
        "CAST(audit_json AS jsonb) AS audit, events_json::text AS events_text, audit_json::text AS audit_text, "
        "events IS NULL AND audit IS NULL AS no_jsonb FROM workflow_event_batches WHERE instance_id = :w "
        "ORDER BY last_seq",
        w=wid,
    )
    assert len(rows) == 3  # the start, each completion
    # the events and audit entries as the JSON text written (migration 0038), compact: no space after a
    # separator (outside the strings, which hold none here)
    assert all(r.no_jsonb for r in rows)
    assert all(", " not in r.events_text and '": ' not in r.events_text for r in rows)
    assert all(", " not in r.audit_text and '": ' not in r.audit_text for r in rows)
    assert all(
        r.definition_id == "" and r.trace_id == "" and r.instance in ("RUNNING", "SUCCEEDED") for r in rows
    )
    start_entry = rows[0].audit[0]
    assert start_entry["action"] == "workflow.start" and start_entry["after_in_response"] is True
    assert set(start_entry) == {"action", "actor_id", "actor_name", "after_in_response"}  # target, request id
    # events: [type, data]; an event of the step activation of an earlier event of its row names it
    assert rows[0].events[0] == ["workflow.started"] and rows[0].events[1][0] == "task.created"
    assert rows[0].events[2] == ["step.activated", {"state": "ACTIVE", "sequence": 1, "+": 1}]
    # the engine's entries of a step name their event; none keeps an operation id
    engine = [e for r in rows for e in r.audit[(1 if r is rows[0] else 0) :]]
    # 2 x (activated, succeeded), then the instance's end
    assert [e.get("ev") is not None for e in engine] == [True] * 4 + [False]
    assert engine[0] == {"ev": 2, "after": {"kind": "TASK"}} and engine[1] == {"ev": 1}
    assert all("operation_id" not in e for e in engine)

    got = _rendered(client, clean, wid, h)
    # every event body, exactly: the whole instance summary as the event's transaction left it, the trace
    # id, the event's data
    items = got["events"]["items"]
    assert [(e["type"], e["body"]["instance"]["state"]) for e in items] == STATES
    for e in items:
        assert e["body"]["instance"] == {
            "id": wid,
            "definition_id": inst.definition_id,
            "version": inst.version,
            "state": e["body"]["instance"]["state"],
            "paused": False,
            "business_key": "order-7",
        }
        assert e["body"]["trace_id"] == inst.trace_id
    assert all(v.definition_id == inst.definition_id for v in got["view"])
    # the audit: the start entry's ``after`` is the instance as the response showed it
    details = sorted(got["details"], key=lambda d: d["id"])
    acts = {e["body"]["step_key"]: e["body"]["activation_id"] for e in items if e["type"] == "step.activated"}
    engine_shapes = [
        (
            v.action,
            v.target_type,
            v.target_id,
            v.before and json.loads(v.before),
            json.loads(v.after),
            v.operation_id == v.id,
        )
        for v in got["audit"]
        if v.actor_id == "system:engine"
    ]
    engine_shapes.sort(key=lambda t: (t[1] != "step", t[2], t[0] != "workflow.step.activated"))
    assert engine_shapes == [
        (
            "workflow.step.activated",
            "step",
            "a",
            None,
            {"kind": "TASK", "step_key": "a", "activation_id": acts["a"], "activation_sequence": 1},
            True,
        ),
        ("workflow.step.succeeded", "step", "a", None, {"step_key": "a", "activation_id": acts["a"]}, True),
        (
            "workflow.step.activated",
            "step",
            "b",
            None,
            {"kind": "TASK", "step_key": "b", "activation_id": acts["b"], "activation_sequence": 1},
            True,
        ),
        ("workflow.step.succeeded", "step", "b", None, {"step_key": "b", "activation_id": acts["b"]}, True),
        ("workflow.succeeded", "workflow", wid, {"state": "RUNNING"}, {"state": "SUCCEEDED"}, True),
    ], engine_shapes
    assert len(details) == 6
    start = next(d for d in got["details"] if d["action"] == "workflow.start")
    assert start["after"] == started["data"]["instance"]
    assert start["after"]["input"] == {"n": 1, "f": 1.1, "nested": {"z": 1, "a": [2]}}

    # the same rows as a release before migration 0038 wrote them (jsonb; its downgrade writes them so):
    # every consumer reads exactly the same
    _run(clean, migration_module("0038_event_batches_json").AS_JSONB)
    assert (
        _run(clean, "SELECT count(*) AS n FROM workflow_event_batches WHERE events_json IS NOT NULL")[0].n
        == 0
    )
    assert _rendered(client, clean, wid, h) == got
    # and in the whole form (what migration 0031's downgrade writes, and every row written before it)
    for statement in _migration().WHOLE_FORM:
        _run(clean, statement)
    rows = _run(
        clean,
        "SELECT definition_id, instance, audit FROM workflow_event_batches WHERE instance_id = :w ORDER BY last_seq",
        w=wid,
    )
    assert all(r.definition_id == inst.definition_id and "id" in r.instance for r in rows)
    assert "after" in rows[0].audit[0] and "after_in_response" not in rows[0].audit[0]
    assert _rendered(client, clean, wid, h) == got


def test_a_start_entry_that_differs_from_the_response_keeps_its_after(client, token, clean) -> None:
    """A URL in the input: the audit keeps it without user info and query values, the response as sent;
    the entry keeps its own ``after``."""
    ns, wid, h, started = _scripted(client, token, clean, {"url": "https://u:p@x.test/?a=1"})
    entry = _run(
        clean,
        "SELECT CAST(audit_json AS jsonb) -> 0 FROM workflow_event_batches WHERE instance_id = :w AND start_response IS NOT NULL",
        w=wid,
    )[0][0]
    assert entry["action"] == "workflow.start" and "after" in entry and "after_in_response" not in entry
    ops = client.get(f"/v1/workflows/{wid}/operations?limit=100", headers=h).get_json()["data"]["items"]
    start = next(o for o in ops if o["action"] == "workflow.start")
    detail = client.get(f"/v1/workflows/{wid}/operations/{start['id']}", headers=h).get_json()["data"]
    assert "u:p@" not in json.dumps(detail["after"]) and detail["after"]["id"] == wid
    assert "u:p@" in json.dumps(started["data"]["instance"])


def test_compact_start_entry_only_drops_an_after_equal_to_the_responses_instance() -> None:
    instance = '{"id":"1","input":{"after":{"x":1},"s":"\\"data\\":{\\"instance\\":"}}'
    entry = '{"action":"workflow.start","target_type":"workflow","actor_id":"c","after":' + instance + "}"
    response = '{"request_id":"r","data":{"instance":' + instance + ',"deduplicated":false}}'
    assert commit_batch.compact_start_entry(entry, response) == (
        '{"action":"workflow.start","target_type":"workflow","actor_id":"c","after_in_response":true}'
    )
    # a prefix of a longer value, another value, another action, a response without the instance
    assert commit_batch.compact_start_entry(entry, response.replace('"1"', '"1","more":2', 1)) == entry
    other = entry.replace('"x":1', '"x":2')
    assert commit_batch.compact_start_entry(other, response) == other
    engine = entry.replace("workflow.start", "workflow.step.activated")
    assert commit_batch.compact_start_entry(engine, response) == engine
    assert commit_batch.compact_start_entry(entry, '{"data":{"other":1}}') == entry
    nested = '{"request_id":{"data":{"instance":' + instance + "}}}"
    assert commit_batch.compact_start_entry(entry, nested) == entry
