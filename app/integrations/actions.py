"""The ``automation_action`` job (X-AUTO): one rule's action for one event. Internal writes go through
the job's effect receipt (a retried or replayed action starts one workflow / sends one signal); an
``http`` action is a signed POST with the outcomes of a webhook delivery (``app.integrations.webhooks``).

Before it acts, the rule's author must still be live and hold the rights of the action's kind
(``automation.authority_problem``); otherwise the execution is ``skipped`` with the reason and the rule
disables itself saying why. A payload naming no execution ends ``dead`` REFERENCE_NOT_FOUND (unless
retention may have removed it: ``webhooks.missing``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app import auth
from app.errors import InvalidArgument, NotFound, PermissionDenied
from app.ids import is_hex32
from app.integrations import automation
from app.integrations.webhooks import USER_AGENT, event_time, missing, signature
from app.ledger import handlers
from app.ledger.context import JobContext
from app.ledger.outcome import JobAborted, PermanentError, Skip
from app.sql import query, run


@dataclass(frozen=True)
class Event:
    """The event of an execution, as the fan-out sees one (``automation.event_document``)."""

    id: str
    type: str
    instance_id: str
    body: str


_LOAD_SQL = """
SELECT x.id, x.rule_id, x.namespace_id, r.enabled, r.disabled_reason, r.action, r.secret,
       r.created_by, e.id AS event_id,
       e.type, e.seq, e.instance_id, e.body::text AS body
FROM automation_executions x
JOIN workflow_events e ON e.batch_id = left(x.event_id, 29) || '000' AND e.id = x.event_id{at}
LEFT JOIN automation_rules r ON r.id = x.rule_id
WHERE x.id = :id
"""
# The execution and its event: with the event's time (the job's payload, ``webhooks.event_time``) in its
# week's partition of the event batches only, as ``webhooks.webhook_delivery`` reads its event.
_LOAD_AT = query("action_load_at", _LOAD_SQL.format(at=" AND e.created_at = CAST(:at AS timestamptz)"))
_LOAD = query("action_load", _LOAD_SQL.format(at=""))


_Q_ACTION_RECORD = query(
    "action_record",
    "UPDATE automation_executions SET status = :s, result = COALESCE(CAST(:r AS jsonb), result), "
    "last_error = :e, updated_at = now() WHERE id = :id",
)


def _record(ctx: JobContext, xid: str, status: str, *, result: Any = None, err: str | None = None) -> None:
    try:
        with ctx.transaction() as conn:
            run(
                conn,
                _Q_ACTION_RECORD,
                {
                    "id": xid,
                    "s": status,
                    "r": None if result is None else json.dumps(result),
                    "e": err and err[:2000],
                },
            )
    except JobAborted:
        pass  # ownership lost: the next owner records its own result


def _http(ctx: JobContext, row: Any, doc: dict) -> dict[str, Any]:
    body = json.dumps({**doc, "seq": row.seq}, separators=(",", ":"), sort_keys=True)
    at = datetime.now(UTC)
    headers = {
        "webhook-id": f"{row.event_id}.{row.rule_id}",
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature([row.secret], f"{row.event_id}.{row.rule_id}", at, body),
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
    }
    res = ctx.http.request(
        "POST", row.action["url"], step_key="action", content=body, headers=headers, receiver_dedups=True
    )
    return {"status_code": res.status_code, "reused": res.reused}


def _stop(ctx: JobContext, row: Any, why: str) -> Skip:
    """The rule may not act (its author): the execution is skipped and the rule disables itself."""
    _record(ctx, row.id, "skipped", err=why)
    try:
        with ctx.transaction() as conn:
            automation.disable_rule(conn, row.namespace_id, row.rule_id, f"disabled automatically: {why}")
    except JobAborted:
        pass
    return Skip(why)


@handlers.register("automation_action")
def automation_action(ctx: JobContext) -> Any:
    xid = (ctx.payload or {}).get("execution_id")
    at = event_time(ctx.payload)
    with ctx.engine.connect() as conn:
        load = _LOAD if at is None else _LOAD_AT
        row = (
            run(conn, load, {"id": xid, "at": at}).first() if isinstance(xid, str) and is_hex32(xid) else None
        )
        acting = row is not None and (row.enabled or automation.admitted_while_disabled(row.disabled_reason))
        if acting and row is not None:  # (acting implies a row; said again for the type checker)
            author = auth.acting_principal(conn, row.created_by)
            ev = Event(row.event_id, row.type, row.instance_id, row.body)
            chain = automation.event_chain(conn, ev)
    if row is None:
        return missing(ctx, "automation execution", xid)
    if not acting:
        reason = "the rule was deleted" if row.enabled is None else "the rule is disabled"
        _record(ctx, row.id, "skipped", err=reason)
        return Skip(reason)
    kind = row.action["kind"]
    why = automation.authority_problem(author, kind)
    if why is not None:
        return _stop(ctx, row, why)
    doc = automation.event_document(ev)
    try:
        if kind == "http":
            result = _http(ctx, row, doc)
        elif kind == "start_workflow":
            result = ctx.effect(
                "start",
                lambda c: automation.start_from_event(
                    c, row.namespace_id, row.action, doc, row.rule_id, chain=chain, author=author
                ),
            )
        else:
            result = ctx.effect(
                "signal",
                lambda c: automation.signal_from_event(c, row.namespace_id, row.action, doc, row.rule_id),
            )
    except PermissionDenied as exc:  # e.g. the version's task queues need tasks:submit the author lacks
        return _stop(ctx, row, exc.message)
    except (InvalidArgument, NotFound) as exc:
        _record(ctx, row.id, "dead", err=exc.message if hasattr(exc, "message") else str(exc))
        raise PermanentError(f"{kind} action refused: {exc}") from None
    except Exception as exc:
        final = ctx.attempt >= ctx.max_attempts or isinstance(exc, PermanentError)
        _record(ctx, row.id, "dead" if final else "retrying", err=str(exc))
        raise
    _record(ctx, row.id, "succeeded", result=result)
    return result
