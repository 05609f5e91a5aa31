"""Automation rules (X-AUTO): on an event type (+ definition filter, + simple field
conditions on the event) run one action as an ``automation_action`` job:

- ``http``: a signed POST of the event (Standard Webhooks headers, the rule's own secret), with the
  destination policy and the outcomes of a webhook delivery;
- ``start_workflow``: start an instance of a pinned definition version, input mapped from the event;
- ``signal``: send a signal to an instance (workflow id, payload... mapped from the event).

Internal writes run through the job's effect receipt (``JobContext.effect``): a retried or replayed
action starts one workflow / sends one signal. Exactly one job per (event, rule): the execution row is
unique per pair and the job's idempotency key is ``automation_action:<event>:<rule>``.

A mapping is any JSON value whose strings ``$.event...`` name a part of the event document
``{"id", "type", "seq", "workflow_id", "data": <the event body>}``.

Automation cannot amplify itself:

- an instance a rule started carries its *chain*: the rules that led to it, oldest first
  (``workflow_instances.automation_chain``; a sub-workflow inherits its parent's). A rule never fires on
  an event of an instance whose chain holds it (its own starts, directly or through other rules), nor on
  the ``signal.*`` events of a signal it sent; and no rule fires on an event of an instance already at
  ``MAX_CHAIN_DEPTH`` (the execution is recorded ``skipped`` with the reason);
- each rule has a rate budget (``rate_budget()`` executions per minute): past it, the event's execution
  is recorded ``skipped`` with the reason and the rule disables itself saying why, like a failing
  subscription (``enable`` starts a new budget).

A rule acts with the rights of its author (``created_by``: the credential that created it, or the last one
that enabled it): checked at create / enable and again each time it acts. ``start_workflow`` needs
``workflows:start`` (and ``tasks:submit`` plus the queue scope when the version has task queues),
``signal`` needs ``workflows:signal``, every kind ``integrations:manage``. A rule whose author was revoked,
expired or lacks the right skips the action and disables itself saying why."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection

from app import audit, auth
from app.auth import Principal, Scope
from app.engine import audit_entries, instances, signals
from app.errors import InvalidArgument, NotFound, PermissionDenied
from app.ids import is_hex32, new_id
from app.integrations import caps
from app.integrations.paging import page, pages
from app.integrations.patterns import (
    ABSENT,
    conditions_hold,
    lookup,
    pattern_problem,
    type_matches,
    validate_conditions,
)
from app.integrations.subscriptions import check_url, definition_filter, new_secret
from app.jsonx import rfc3339
from app.ledger.enqueue import enqueue
from app.observability.logs import redact_url_fields
from app.settings import RULE_RATE_PER_MINUTE
from app.sql import query, run

MAX_RULES = 100  # per namespace
MAX_ACTION_BYTES = 16384
KINDS = ("http", "start_workflow", "signal")
MAX_CHAIN_DEPTH = 3  # no rule fires on events of an instance that 3 rule starts in a row led to
SIGNAL_ACTOR = "automation:"  # a rule's signals are sent by actor "automation:<rule id>"
# what the author of a rule of each kind must hold (plus tasks:submit and the queues of a start's version)
KIND_SCOPES = {
    "http": (Scope.INTEGRATIONS_MANAGE,),
    "start_workflow": (Scope.INTEGRATIONS_MANAGE, Scope.WORKFLOWS_START),
    "signal": (Scope.INTEGRATIONS_MANAGE, Scope.WORKFLOWS_SIGNAL),
}
_ABSENT = object()


BUDGET_SPENT = "rate budget spent"
AUTO_DISABLED = "disabled automatically: "


def admitted_while_disabled(disabled_reason: str | None) -> bool:
    """A rule that disabled itself for its rate budget still runs the executions admitted within the
    budget (those queued before); a person's disable, or its author's loss of rights, stops them all."""
    return (disabled_reason or "").startswith(AUTO_DISABLED + BUDGET_SPENT)


def rate_budget() -> int:
    """Executions one rule may have per minute; past them the rule disables itself."""
    return RULE_RATE_PER_MINUTE.get()


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
def validate_action(conn: Connection, ns: str, action: Any) -> tuple[dict[str, Any], list[str]]:
    """The action of a rule, checked; with the task queues of a ``start_workflow`` action's version."""
    if not isinstance(action, dict) or action.get("kind") not in KINDS:
        raise InvalidArgument(f"action.kind must be one of {', '.join(KINDS)}", field="action.kind")
    if len(json.dumps(action)) > MAX_ACTION_BYTES:
        raise InvalidArgument(f"action must be at most {MAX_ACTION_BYTES} bytes of JSON", field="action")
    kind = action["kind"]
    allowed = {
        "http": {"kind", "url"},
        "start_workflow": {"kind", "definition_id", "version", "input", "business_key"},
        "signal": {
            "kind",
            "workflow_id",
            "name",
            "payload_version",
            "target_step_key",
            "target_activation_sequence",
            "correlation_key",
            "payload",
        },
    }[kind]
    extra = sorted(set(action) - allowed)
    if extra:
        raise InvalidArgument(f"unknown field {extra[0]} for a {kind} action", field=f"action.{extra[0]}")
    queues: list[str] = []
    if kind == "http":
        check_url(action.get("url"), "action.url")
    elif kind == "start_workflow":
        queues = start_queues(conn, ns, action)
    else:
        for f in ("workflow_id", "name", "payload_version", "target_step_key"):
            if not isinstance(action.get(f), str):
                raise InvalidArgument("required: a string (or a $.event mapping)", field=f"action.{f}")
    return action, queues


_Q_AUTOMATION_START_QUEUES = query(
    "automation_start_queues",
    "SELECT v.queues FROM workflow_definition_versions v JOIN workflow_definitions d "
    "ON d.id = v.definition_id WHERE d.id = :d AND d.namespace_id = :ns AND v.version = :v",
)


def start_queues(conn: Connection, ns: str, action: dict[str, Any]) -> list[str]:
    """The task queues of a ``start_workflow`` action's pinned version (400 when it names none of ``ns``)."""
    def_id, version = action.get("definition_id"), action.get("version")
    if not isinstance(def_id, str) or not is_hex32(def_id):
        raise InvalidArgument("a 32-char hex definition id", field="action.definition_id")
    found = (
        run(
            conn,
            _Q_AUTOMATION_START_QUEUES,
            {"d": def_id, "ns": ns, "v": version},
        ).first()
        if isinstance(version, str)
        else None
    )
    if found is None:
        raise InvalidArgument(
            "no such published version of the definition in this namespace", field="action.version"
        )
    return list(found.queues)


def authority_problem(author: Principal | None, kind: str, queues: Sequence[str] = ()) -> str | None:
    """Why ``author`` may not have a rule of ``kind`` act (None: it may)."""
    return auth.authority_problem(author, KIND_SCOPES[kind], queues, who="the rule's author")


_COLS = (
    "id, name, event_type, definition_id, conditions, action, enabled, disabled_reason, revision, created_at, "
    "updated_at"
)


def rule_view(row: Any) -> dict[str, Any]:
    m = row._mapping
    return {
        "id": m["id"],
        "name": m["name"],
        "event_type": m["event_type"],
        "definition_id": m["definition_id"],
        "conditions": m["conditions"],
        "action": redact_url_fields(m["action"]),
        "enabled": m["enabled"],
        "disabled_reason": m["disabled_reason"],
        "revision": m["revision"],
        "created_at": rfc3339(m["created_at"]),
        "updated_at": rfc3339(m["updated_at"]),
    }


def _check_author(p: Principal, kind: str, queues: Sequence[str]) -> None:
    why = authority_problem(p, kind, queues)
    if why is not None:
        raise PermissionDenied(f"a {kind} rule acts with its author's rights: {why}")


_Q_AUTOMATION_CREATE_RULE = query(
    "automation_create_rule",
    f"INSERT INTO automation_rules (id, namespace_id, name, event_type, definition_id, conditions, action, "
    f"secret, created_by) VALUES (:id, :ns, :name, :et, :def, CAST(:cond AS jsonb), CAST(:act AS jsonb), "
    f":secret, :by) RETURNING {_COLS}",
)


def create_rule(conn: Connection, p: Principal, rid: str | None, req: dict) -> dict[str, Any]:
    ns = p.namespace_id
    why = pattern_problem(req.get("event_type"))
    if why:
        raise InvalidArgument(why, field="event_type")
    action, queues = validate_action(conn, ns, req.get("action"))
    _check_author(p, action["kind"], queues)
    params = {
        "id": new_id(),
        "ns": ns,
        "name": req["name"],
        "et": req["event_type"],
        "def": definition_filter(conn, ns, req.get("definition_id")),
        "cond": json.dumps(validate_conditions(req.get("conditions", []))),
        "act": json.dumps(action),
        "secret": new_secret() if action["kind"] == "http" else None,
        "by": p.actor_id,
    }
    secret = params["secret"]
    caps.reserve(
        conn,
        "automation_rules",
        ns,
        MAX_RULES,
        "AUTOMATION_RULE_LIMIT",
        f"a namespace has at most {MAX_RULES} automation rules",
    )
    row = run(
        conn,
        _Q_AUTOMATION_CREATE_RULE,
        params,
    ).one()
    out = rule_view(row)
    audit.record(
        conn,
        principal=p,
        request_id=rid,
        action="automation_rule.create",
        target_type="automation_rule",
        target_id=out["id"],
        after=out,
    )
    return {**out, **({"secret": secret} if secret else {})}


_RULE_READ = query(
    "automation_rule_read", f"SELECT {_COLS} FROM automation_rules WHERE id = :id AND namespace_id = :ns"
)
_RULE_LOCK = query(
    "automation_rule_lock",
    f"SELECT {_COLS} FROM automation_rules WHERE id = :id AND namespace_id = :ns FOR UPDATE",
)


def _rule(conn: Connection, ns: str, rule_id: str, lock: bool = False) -> Any:
    row = (
        run(conn, _RULE_LOCK if lock else _RULE_READ, {"id": rule_id, "ns": ns}).first()
        if is_hex32(rule_id)
        else None
    )
    if row is None:
        raise NotFound("automation rule not found")
    return row


def get_rule(conn: Connection, ns: str, rule_id: str) -> dict[str, Any]:
    return rule_view(_rule(conn, ns, rule_id))


_RULES_PAGES = pages(
    "automation_rules_page",
    f"SELECT {_COLS} FROM automation_rules WHERE namespace_id = :ns {{after}} {{order}}",
)


def list_rules(conn: Connection, ns: str, limit: int, cursor: str | None) -> dict[str, Any]:
    return page(
        conn,
        _RULES_PAGES,
        {"ns": ns},
        binding={"ns": ns, "k": "automation_rules"},
        limit=limit,
        cursor=cursor,
        view=rule_view,
    )


# enabled: the enabling credential becomes the author, the budget starts anew; disabled by a person
_RULE_ENABLE = query(
    "automation_rule_enable",
    f"""
UPDATE automation_rules SET enabled = true, disabled_reason = NULL, created_by = :by, budget_used = 0,
    budget_window_at = NULL, revision = revision + CASE WHEN enabled THEN 0 ELSE 1 END, updated_at = now()
WHERE id = :id RETURNING {_COLS}
""",
)
_RULE_DISABLE = query(
    "automation_rule_disable",
    f"""
UPDATE automation_rules SET enabled = false, disabled_reason = 'disabled by ' || CAST(:who AS text),
    revision = revision + CASE WHEN enabled THEN 1 ELSE 0 END, updated_at = now()
WHERE id = :id RETURNING {_COLS}
""",
)


def set_rule_enabled(
    conn: Connection, p: Principal, rid: str | None, rule_id: str, enabled: bool, reason: str | None = None
) -> dict[str, Any]:
    """Disable (by a person), or enable: the enabling credential becomes the rule's author (its rights
    are checked as at create), the reason it was disabled is cleared and a new rate budget starts.
    ``reason``, the person's, goes to the audit row."""
    locked = _rule(conn, p.namespace_id, rule_id, lock=True)
    before = rule_view(locked)
    if enabled:
        action = locked.action
        queues = start_queues(conn, p.namespace_id, action) if action["kind"] == "start_workflow" else []
        _check_author(p, action["kind"], queues)
    row = run(
        conn, _RULE_ENABLE if enabled else _RULE_DISABLE, {"id": rule_id, "by": p.actor_id, "who": p.name}
    ).one()
    after = rule_view(row)
    audit.record(
        conn,
        principal=p,
        request_id=rid,
        action=f"automation_rule.{'enable' if enabled else 'disable'}",
        target_type="automation_rule",
        target_id=rule_id,
        before=before,
        after=after,
        reason=reason,
    )
    return after


def _execution_view(r: Any) -> dict[str, Any]:
    return {
        "id": r.id,
        "event_id": r.event_id,
        "status": r.status,
        "result": r.result,
        "last_error": r.last_error,
        "job_id": None if r.job_id is None else str(r.job_id),
        "job_status": r.job_status,
        "attempts": r.attempts or 0,
        "created_at": rfc3339(r.created_at),
        "updated_at": rfc3339(r.updated_at),
    }


_EXECUTIONS_PAGES = pages(
    "automation_executions_page",
    "SELECT x.id, x.event_id, x.status, x.result, x.last_error, x.created_at, x.updated_at, x.job_id, "
    "j.status AS job_status, j.attempts FROM automation_executions x LEFT JOIN workflow_jobs j ON j.id = x.job_id "
    "WHERE x.rule_id = :r {after} {order}",
    alias="x.",
    newest_first=True,
)


def executions(conn: Connection, ns: str, rule_id: str, limit: int, cursor: str | None) -> dict[str, Any]:
    """The rule's execution log, newest first."""
    _rule(conn, ns, rule_id)
    return page(
        conn,
        _EXECUTIONS_PAGES,
        {"r": rule_id},
        binding={"ns": ns, "rule": rule_id, "k": "automation_executions"},
        limit=limit,
        cursor=cursor,
        view=_execution_view,
    )


# --------------------------------------------------------------------------- fan-out (event_dispatch)
_Q_AUTOMATION_ENABLED_RULES = query(
    "automation_enabled_rules",
    "SELECT id, namespace_id, event_type, definition_id, conditions FROM automation_rules "
    "WHERE namespace_id = :ns AND enabled ORDER BY created_at, id LIMIT :n",
)


def enabled_rules(conn: Connection, ns: str) -> Sequence[Any]:
    return run(
        conn,
        _Q_AUTOMATION_ENABLED_RULES,
        {"ns": ns, "n": MAX_RULES},
    ).all()


# The chain of an instance: its own, else its nearest ancestor's (a sub-workflow of an instance a rule
# started is that rule's work too); bounded walk up the parent links.
_CHAIN = query(
    "automation_chain",
    """
WITH RECURSIVE up AS (
    SELECT id, parent_instance_id, automation_chain, 1 AS n FROM workflow_instances WHERE id = :i
    UNION ALL
    SELECT w.id, w.parent_instance_id, w.automation_chain, up.n + 1
    FROM workflow_instances w JOIN up ON w.id = up.parent_instance_id
    WHERE up.automation_chain IS NULL AND up.n < 32
)
SELECT automation_chain FROM up WHERE automation_chain IS NOT NULL ORDER BY n LIMIT 1
""",
)


def chain_of(conn: Connection, instance_id: str) -> list[str]:
    """The automation rules that led to ``instance_id`` (oldest first; empty: no rule started it)."""
    return list(run(conn, _CHAIN, {"i": instance_id}).scalar() or [])


_Q_AUTOMATION_SIGNAL_RULES = query(
    "automation_signal_rules",
    "SELECT id, actor_id FROM workflow_signals WHERE id = ANY(:ids) AND actor_id LIKE 'automation:%'",
)


def _signal_rules(conn: Connection, events: Sequence[Any]) -> dict[str, str]:
    """event id -> the rule that sent the signal of a ``signal.*`` event (signals sent by rules only)."""
    by_signal: dict[str, list[str]] = {}  # a signal has several events (accepted, then consumed...)
    for ev in events:
        if ev.type.startswith("signal."):
            sid = _body(ev).get("signal_id")
            if isinstance(sid, str):
                by_signal.setdefault(sid, []).append(ev.id)
    if not by_signal:
        return {}
    rows = run(
        conn,
        _Q_AUTOMATION_SIGNAL_RULES,
        {"ids": list(by_signal)},
    ).all()
    return {eid: r.actor_id[len(SIGNAL_ACTOR) :] for r in rows for eid in by_signal[r.id]}


def event_chain(conn: Connection, ev: Any, instance_chain: list[str] | None = None) -> list[str]:
    """The rules that led to event ``ev``: its instance's chain, plus the rule that sent its signal."""
    chain = chain_of(conn, ev.instance_id) if instance_chain is None else instance_chain
    sender = _signal_rules(conn, [ev]).get(ev.id)
    return chain + [sender] if sender and sender not in chain else chain


def _body(ev: Any) -> dict[str, Any]:
    body = ev.body if isinstance(ev.body, dict) else json.loads(ev.body)
    return body if isinstance(body, dict) else {}


def _matches(r: Any, ev: Any, doc: dict[str, Any] | None) -> bool:
    if (r.definition_id and r.definition_id != ev.definition_id) or not type_matches([r.event_type], ev.type):
        return False
    return not r.conditions or conditions_hold(r.conditions, doc or event_document(ev))


_EXECUTION = query(
    "automation_execution",
    "INSERT INTO automation_executions (id, namespace_id, rule_id, event_id, status, last_error) "
    "VALUES (:id, :ns, :r, :e, :st, :err) ON CONFLICT (rule_id, event_id) DO NOTHING RETURNING id",
)
# The rule's budget window: a new one starts when the last began a minute ago or more. All expressions of
# SET read the row as it was. NULL when the rule was disabled meanwhile.
_SPEND = query(
    "automation_spend",
    """
UPDATE automation_rules SET
    budget_used = CASE WHEN budget_window_at > now() - interval '1 minute' THEN budget_used ELSE 0 END + :n,
    budget_window_at = CASE WHEN budget_window_at > now() - interval '1 minute' THEN budget_window_at ELSE now() END
WHERE id = :id AND enabled
RETURNING budget_used
""",
)


def _execution(
    conn: Connection, ns: str, rule_id: str, event_id: str, skipped: str | None = None
) -> str | None:
    """The execution row of (rule, event), or None when it exists already; ``skipped``: recorded as
    skipped with that reason (no job)."""
    return run(
        conn,
        _EXECUTION,
        {
            "id": new_id(),
            "ns": ns,
            "r": rule_id,
            "e": event_id,
            "st": "skipped" if skipped else "pending",
            "err": skipped,
        },
    ).scalar()


_Q_AUTOMATION_ACTION_JOB = query(
    "automation_action_job",
    "UPDATE automation_executions SET job_id = :j WHERE id = :id",
)


def _action_job(conn: Connection, ns: str, rule_id: str, ev: Any) -> bool:
    """The execution of rule ``rule_id`` for event ``ev`` and its ``automation_action`` job, whose payload
    carries the event's ``created_at`` when the event has one (``webhooks.event_time``)."""
    xid = _execution(conn, ns, rule_id, ev.id)
    if xid is None:
        return False
    key = f"automation_action:{ev.id}:{rule_id}"
    payload = {"execution_id": xid}
    at = getattr(ev, "created_at", None)
    if at is not None:
        payload["event_at"] = at.isoformat()
    job = enqueue(conn, "automation_action", payload, idempotency_key=key, operation_key=key[:64])
    run(conn, _Q_AUTOMATION_ACTION_JOB, {"j": job.id, "id": xid})
    return True


_Q_AUTOMATION_DISABLE_RULE = query(
    "automation_disable_rule",
    f"UPDATE automation_rules SET enabled = false, disabled_reason = :why, revision = revision + 1, "
    f"updated_at = now() WHERE id = :id AND enabled RETURNING {_COLS}",
)


def disable_rule(conn: Connection, ns: str, rule_id: str, reason: str) -> None:
    """The rule disables itself (rate budget spent, author revoked), saying why; audited as the engine."""
    row = run(
        conn,
        _Q_AUTOMATION_DISABLE_RULE,
        {"id": rule_id, "why": reason[:1000]},
    ).first()
    if row is not None:
        audit.record(
            conn,
            principal=audit_entries.system_principal(ns),
            request_id=None,
            action="automation_rule.disable",
            target_type="automation_rule",
            target_id=rule_id,
            after=rule_view(row),
            reason=reason[:1000],
        )


def fan_out_events(conn: Connection, events: Sequence[Any], rules: Iterable[Any]) -> int:
    """One execution + ``automation_action`` job per matching rule of each event (idempotent), within the
    guards of the module docstring. ``events`` are one dispatch's: one instance's, in order."""
    rules = list(rules)
    if not rules or not events:
        return 0
    chain = chain_of(conn, events[0].instance_id)
    senders = _signal_rules(conn, events)
    matched: dict[str, list[Any]] = {}
    too_deep: dict[str, list[Any]] = {}
    for ev in events:
        sender = senders.get(ev.id)
        ev_chain = chain + [sender] if sender and sender not in chain else chain
        doc = event_document(ev) if any(r.conditions for r in rules) else None
        for r in rules:
            if r.id in ev_chain or not _matches(r, ev, doc):
                continue  # a rule never acts on its own work
            (too_deep if len(ev_chain) >= MAX_CHAIN_DEPTH else matched).setdefault(r.id, []).append(ev)
    n = 0
    deep = f"the event comes from a chain of {MAX_CHAIN_DEPTH} automation rules (the most a chain may have)"
    for r in rules:  # one lock order: the rules' (created_at, id)
        for ev in too_deep.get(r.id, ()):
            _execution(conn, r.namespace_id, r.id, ev.id, skipped=deep)
        evs = matched.get(r.id)
        if not evs:
            continue
        used = run(conn, _SPEND, {"id": r.id, "n": len(evs)}).scalar()
        if used is None:
            continue  # disabled since the rules were read
        allowed = max(0, min(len(evs), rate_budget() - (used - len(evs))))
        for ev in evs[:allowed]:
            n += _action_job(conn, r.namespace_id, r.id, ev)
        if allowed < len(evs):
            why = f"{BUDGET_SPENT}: more than {rate_budget()} executions in a minute (LEDGERFLOW_RULE_RATE_PER_MINUTE)"
            for ev in evs[allowed:]:
                _execution(conn, r.namespace_id, r.id, ev.id, skipped=why)
            disable_rule(conn, r.namespace_id, r.id, f"{AUTO_DISABLED}{why}")
    return n


# --------------------------------------------------------------------------- the internal writes
def start_from_event(
    conn: Connection,
    ns: str,
    action: dict,
    doc: dict,
    rule_id: str,
    *,
    chain: Sequence[str] = (),
    author: Principal | None = None,
) -> dict[str, Any]:
    """Start the action's workflow; the new instance's chain is the event's ``chain`` + this rule, and the
    start is checked against the ``author``'s rights (tasks:submit and the queues of the version)."""
    body = {
        "definition_id": action["definition_id"],
        "version": action["version"],
        "input": resolve(action.get("input", {}), doc),
    }
    if "business_key" in action:
        body["business_key"] = str(resolve(action["business_key"], doc) or "")
    new_chain = [*chain, rule_id]

    def check_queues(queues: list[str]) -> None:
        why = authority_problem(author, "start_workflow", queues)
        if why is not None:
            raise PermissionDenied(why)

    def created(c: Connection, inst: dict) -> None:
        audit_entries.advance(
            c,
            inst,
            "workflow.start",
            after={
                **instances.instance_view(inst),
                "automation_rule_id": rule_id,
                "event_id": doc["id"],
                "automation_depth": len(new_chain),
            },
        )

    inst = instances.start_workflow(
        conn, ns, body, check_queues=check_queues, on_created=created, automation_chain=new_chain
    )
    return {"workflow_id": inst["id"]}


def _sequence(value: Any) -> int:
    """The mapped target activation sequence: 1 when the mapping names nothing (or 0), else 1..2^31-1."""
    if value in (None, "", 0):
        return 1
    text_ = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""
    if not (text_.isascii() and text_.isdigit() and len(text_) <= 10 and 1 <= int(text_) <= 2**31 - 1):
        raise InvalidArgument(
            "the mapped target_activation_sequence is not a sequence number",
            field="action.target_activation_sequence",
        )
    return int(text_)


_Q_AUTOMATION_SIGNAL_FROM_EVENT = query(
    "automation_signal_from_event",
    "SELECT namespace_id FROM workflow_instances WHERE id = :i",
)


def signal_from_event(conn: Connection, ns: str, action: dict, doc: dict, rule_id: str) -> dict[str, Any]:
    wid = resolve(action["workflow_id"], doc)
    if not isinstance(wid, str) or not is_hex32(wid):
        raise InvalidArgument("the mapped workflow_id is not a workflow id", field="action.workflow_id")
    owner = run(conn, _Q_AUTOMATION_SIGNAL_FROM_EVENT, {"i": wid}).scalar()
    if owner != ns:
        raise NotFound("workflow not found")
    req = {
        "name": resolve(action["name"], doc),
        "payload_version": resolve(action["payload_version"], doc),
        "target_step_key": resolve(action["target_step_key"], doc),
        "target_activation_sequence": _sequence(resolve(action.get("target_activation_sequence", 1), doc)),
        "correlation_key": str(resolve(action.get("correlation_key", "$.event.id"), doc))[:512],
        "payload": resolve(action.get("payload", {}), doc),
        "reason": f"automation rule {rule_id}",
        "evidence_ref": f"event:{doc['id']}",
    }
    sig = signals.send(conn, wid, SIGNAL_ACTOR + rule_id, req)
    return {"workflow_id": wid, "signal_id": sig["id"]}
