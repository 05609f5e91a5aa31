"""Automation rules (SPEC X-AUTO; issue 10): on an event type (+ definition filter, + simple field
conditions on the event) run one action as an ``automation_action`` job:

- ``http``: a signed POST of the event (Standard Webhooks headers, the rule's own secret), with the
  destination policy and the outcomes of a webhook delivery;
- ``start_workflow``: start an instance of a pinned definition version, input mapped from the event;
- ``signal``: send a signal to an instance (workflow id, payload... mapped from the event).

Internal writes run through the job's effect receipt (``JobContext.effect``): a retried or replayed
action starts one workflow / sends one signal. Exactly one job per (event, rule): the execution row is
unique per pair and the job's idempotency key is ``automation_action:<event>:<rule>``.

A mapping is any JSON value whose strings ``$.event...`` name a part of the event document
``{"id", "type", "seq", "workflow_id", "data": <the event body>}``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, text

from app import audit
from app.auth import Principal
from app.engine import instances, oplog, signals
from app.errors import InvalidArgument, LimitExceeded, NotFound
from app.ids import is_hex32, new_id
from app.integrations.paging import page
from app.integrations.patterns import (
    ABSENT,
    conditions_hold,
    lookup,
    pattern_problem,
    type_matches,
    validate_conditions,
)
from app.integrations.subscriptions import check_url, new_secret
from app.jsonx import rfc3339
from app.ledger.enqueue import enqueue

MAX_RULES = 100  # per namespace
MAX_ACTION_BYTES = 16384
KINDS = ("http", "start_workflow", "signal")
_ABSENT = object()


# --------------------------------------------------------------------------- mappings
def _map(value: Any, doc: dict, depth: int = 0) -> Any:
    if depth > 16:
        raise InvalidArgument("a mapping nests at most 16 levels")
    if isinstance(value, str) and value.startswith("$.event"):
        rest = value[len("$.event") :].lstrip(".")
        found = lookup(doc, rest) if rest else doc
        return _ABSENT if found is ABSENT else found
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            r = _map(v, doc, depth + 1)
            if r is not _ABSENT:
                out[k] = r
        return out
    if isinstance(value, list):
        return [None if (r := _map(v, doc, depth + 1)) is _ABSENT else r for v in value]
    return value


def resolve(mapping: Any, doc: dict) -> Any:
    out = _map(mapping, doc)
    return None if out is _ABSENT else out


def event_document(ev: Any) -> dict[str, Any]:
    body = ev.body if isinstance(ev.body, dict) else json.loads(ev.body)
    return {"id": ev.id, "type": ev.type, "workflow_id": ev.instance_id, "data": body}


# --------------------------------------------------------------------------- rules
def validate_action(conn: Connection, ns: str, action: Any) -> dict[str, Any]:
    if not isinstance(action, dict) or action.get("kind") not in KINDS:
        raise InvalidArgument(f"action.kind must be one of {', '.join(KINDS)}", field="action.kind")
    if len(json.dumps(action)) > MAX_ACTION_BYTES:
        raise InvalidArgument(f"action must be at most {MAX_ACTION_BYTES} bytes of JSON", field="action")
    kind = action["kind"]
    allowed = {
        "http": {"kind", "url"},
        "start_workflow": {"kind", "definition_id", "version", "input", "business_key"},
        "signal": {"kind", "workflow_id", "name", "payload_version", "target_step_key",
                   "target_activation_sequence", "correlation_key", "payload"},
    }[kind]  # fmt: skip
    extra = sorted(set(action) - allowed)
    if extra:
        raise InvalidArgument(f"unknown field {extra[0]} for a {kind} action", field=f"action.{extra[0]}")
    if kind == "http":
        check_url(action.get("url"), "action.url")
    elif kind == "start_workflow":
        def_id = action.get("definition_id")
        if not isinstance(def_id, str) or not is_hex32(def_id):
            raise InvalidArgument("a 32-char hex definition id", field="action.definition_id")
        found = conn.execute(
            text(
                "SELECT 1 FROM workflow_definition_versions v JOIN workflow_definitions d ON d.id = v.definition_id "
                "WHERE d.id = :d AND d.namespace_id = :ns AND v.version = :v"
            ),
            {"d": def_id, "ns": ns, "v": action.get("version")},
        ).first()
        if found is None:
            raise InvalidArgument("no such published version of the definition in this namespace",
                                  field="action.version")  # fmt: skip
    else:
        for f in ("workflow_id", "name", "payload_version", "target_step_key"):
            if not isinstance(action.get(f), str):
                raise InvalidArgument("required: a string (or a $.event mapping)", field=f"action.{f}")
    return action


_COLS = "id, name, event_type, definition_id, conditions, action, enabled, revision, created_at, updated_at"


def rule_view(row: Any) -> dict[str, Any]:
    m = row._mapping
    return {
        "id": m["id"], "name": m["name"], "event_type": m["event_type"], "definition_id": m["definition_id"],
        "conditions": m["conditions"], "action": m["action"], "enabled": m["enabled"], "revision": m["revision"],
        "created_at": rfc3339(m["created_at"]), "updated_at": rfc3339(m["updated_at"]),
    }  # fmt: skip


def create_rule(conn: Connection, p: Principal, rid: str | None, req: dict) -> dict[str, Any]:
    ns = p.namespace_id
    if (
        conn.execute(
            text("SELECT count(*) FROM automation_rules WHERE namespace_id = :ns"), {"ns": ns}
        ).scalar_one()
        >= MAX_RULES
    ):
        raise LimitExceeded("AUTOMATION_RULE_LIMIT", f"a namespace has at most {MAX_RULES} automation rules")
    why = pattern_problem(req.get("event_type"))
    if why:
        raise InvalidArgument(why, field="event_type")
    action = validate_action(conn, ns, req.get("action"))
    secret = new_secret() if action["kind"] == "http" else None
    row = conn.execute(
        text(
            f"INSERT INTO automation_rules (id, namespace_id, name, event_type, definition_id, conditions, action, "
            f"secret) VALUES (:id, :ns, :name, :et, :def, CAST(:cond AS jsonb), CAST(:act AS jsonb), :secret) "
            f"RETURNING {_COLS}"
        ),
        {"id": new_id(), "ns": ns, "name": req["name"], "et": req["event_type"], "def": req.get("definition_id"),
         "cond": json.dumps(validate_conditions(req.get("conditions", []))), "act": json.dumps(action),
         "secret": secret},
    ).one()  # fmt: skip
    out = rule_view(row)
    audit.record(conn, principal=p, request_id=rid, action="automation_rule.create", target_type="automation_rule",
                 target_id=out["id"], after=out)  # fmt: skip
    return {**out, **({"secret": secret} if secret else {})}


def _rule(conn: Connection, ns: str, rule_id: str, lock: bool = False) -> Any:
    row = (
        conn.execute(
            text(f"SELECT {_COLS} FROM automation_rules WHERE id = :id AND namespace_id = :ns"
                 + (" FOR UPDATE" if lock else "")),
            {"id": rule_id, "ns": ns},
        ).first()
        if is_hex32(rule_id)
        else None
    )  # fmt: skip
    if row is None:
        raise NotFound("automation rule not found")
    return row


def get_rule(conn: Connection, ns: str, rule_id: str) -> dict[str, Any]:
    return rule_view(_rule(conn, ns, rule_id))


def list_rules(conn: Connection, ns: str, limit: int, cursor: str | None) -> dict[str, Any]:
    return page(
        conn, f"SELECT {_COLS} FROM automation_rules WHERE namespace_id = :ns {{after}} {{order}}", {"ns": ns},
        binding={"ns": ns, "k": "automation_rules"}, limit=limit, cursor=cursor, view=rule_view,
    )  # fmt: skip


def set_rule_enabled(
    conn: Connection, p: Principal, rid: str | None, rule_id: str, enabled: bool
) -> dict[str, Any]:
    before = rule_view(_rule(conn, p.namespace_id, rule_id, lock=True))
    row = conn.execute(
        text(f"UPDATE automation_rules SET enabled = :e, revision = revision + CASE WHEN enabled = :e THEN 0 ELSE 1 END, "
             f"updated_at = now() WHERE id = :id RETURNING {_COLS}"),
        {"id": rule_id, "e": enabled},
    ).one()  # fmt: skip
    after = rule_view(row)
    audit.record(conn, principal=p, request_id=rid, action=f"automation_rule.{'enable' if enabled else 'disable'}",
                 target_type="automation_rule", target_id=rule_id, before=before, after=after)  # fmt: skip
    return after


def _execution_view(r: Any) -> dict[str, Any]:
    return {"id": r.id, "event_id": r.event_id, "status": r.status, "result": r.result, "last_error": r.last_error,
            "job_id": None if r.job_id is None else str(r.job_id), "job_status": r.job_status,
            "attempts": r.attempts or 0, "created_at": rfc3339(r.created_at), "updated_at": rfc3339(r.updated_at)}  # fmt: skip


def executions(conn: Connection, ns: str, rule_id: str, limit: int, cursor: str | None) -> dict[str, Any]:
    """The rule's execution log, newest first."""
    _rule(conn, ns, rule_id)
    return page(
        conn,
        "SELECT x.id, x.event_id, x.status, x.result, x.last_error, x.created_at, x.updated_at, x.job_id, "
        "j.status AS job_status, j.attempts FROM automation_executions x LEFT JOIN workflow_jobs j ON j.id = x.job_id "
        "WHERE x.rule_id = :r {after} {order}",
        {"r": rule_id}, binding={"ns": ns, "rule": rule_id, "k": "automation_executions"}, limit=limit,
        cursor=cursor, view=_execution_view, alias="x.", newest_first=True,
    )  # fmt: skip


# --------------------------------------------------------------------------- fan-out (event_dispatch)
def enabled_rules(conn: Connection, ns: str) -> list[Any]:
    return conn.execute(
        text(
            "SELECT id, event_type, definition_id, conditions FROM automation_rules WHERE namespace_id = :ns "
            "AND enabled ORDER BY created_at, id LIMIT :n"
        ),
        {"ns": ns, "n": MAX_RULES},
    ).all()


def fan_out_event(conn: Connection, ev: Any, rules: Iterable[Any]) -> int:
    """One execution + ``automation_action`` job per matching rule of event ``ev`` (idempotent)."""
    n = 0
    doc = None
    for r in rules:
        if (r.definition_id and r.definition_id != ev.definition_id) or not type_matches(
            [r.event_type], ev.type
        ):
            continue
        if r.conditions:
            doc = doc or event_document(ev)
            if not conditions_hold(r.conditions, doc):
                continue
        xid = conn.execute(
            text(
                "INSERT INTO automation_executions (id, namespace_id, rule_id, event_id) VALUES (:id, :ns, :r, :e) "
                "ON CONFLICT (rule_id, event_id) DO NOTHING RETURNING id"
            ),
            {"id": new_id(), "ns": ev.namespace_id, "r": r.id, "e": ev.id},
        ).scalar()
        if xid is None:
            continue
        key = f"automation_action:{ev.id}:{r.id}"
        job = enqueue(
            conn, "automation_action", {"execution_id": xid}, idempotency_key=key, operation_key=key[:64]
        )
        conn.execute(
            text("UPDATE automation_executions SET job_id = :j WHERE id = :id"), {"j": job.id, "id": xid}
        )
        n += 1
    return n


# --------------------------------------------------------------------------- the internal writes
def start_from_event(conn: Connection, ns: str, action: dict, doc: dict, rule_id: str) -> dict[str, Any]:
    body = {
        "definition_id": action["definition_id"],
        "version": action["version"],
        "input": resolve(action.get("input", {}), doc),
    }
    if "business_key" in action:
        body["business_key"] = str(resolve(action["business_key"], doc) or "")
    inst = instances.start_workflow(
        conn, ns, body,
        on_created=lambda c, created: oplog.advance(
            c, created, "workflow.start", after={**instances.instance_view(created), "automation_rule_id": rule_id,
                                                 "event_id": doc["id"]},
        ),
    )  # fmt: skip
    return {"workflow_id": inst["id"]}


def signal_from_event(conn: Connection, ns: str, action: dict, doc: dict, rule_id: str) -> dict[str, Any]:
    wid = resolve(action["workflow_id"], doc)
    if not isinstance(wid, str) or not is_hex32(wid):
        raise InvalidArgument("the mapped workflow_id is not a workflow id", field="action.workflow_id")
    owner = conn.execute(
        text("SELECT namespace_id FROM workflow_instances WHERE id = :i"), {"i": wid}
    ).scalar()
    if owner != ns:
        raise NotFound("workflow not found")
    req = {
        "name": resolve(action["name"], doc),
        "payload_version": resolve(action["payload_version"], doc),
        "target_step_key": resolve(action["target_step_key"], doc),
        "target_activation_sequence": int(resolve(action.get("target_activation_sequence", 1), doc) or 1),
        "correlation_key": str(resolve(action.get("correlation_key", "$.event.id"), doc))[:512],
        "payload": resolve(action.get("payload", {}), doc),
        "reason": f"automation rule {rule_id}",
        "evidence_ref": f"event:{doc['id']}",
    }
    sig = signals.send(conn, wid, f"automation:{rule_id}", req)
    return {"workflow_id": wid, "signal_id": sig["id"]}
