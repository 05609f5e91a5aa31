"""The ``automation_action`` job (X-AUTO): one rule's action for one event. Internal writes go through
the job's effect receipt (a retried or replayed action starts one workflow / sends one signal); an
``http`` action is a signed POST with the outcomes of a webhook delivery (``app.integrations.webhooks``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from app.errors import InvalidArgument, NotFound
from app.integrations import automation
from app.integrations.webhooks import USER_AGENT, signature
from app.ledger import handlers
from app.ledger.context import JobContext
from app.ledger.outcome import JobAborted, PermanentError, Skip

_LOAD = text(
    """
SELECT x.id, x.rule_id, x.namespace_id, r.enabled, r.action, r.secret, e.id AS event_id, e.type, e.seq,
       e.instance_id, e.body::text AS body
FROM automation_executions x
JOIN workflow_events e ON e.batch_id = left(x.event_id, 29) || '000' AND e.id = x.event_id
LEFT JOIN automation_rules r ON r.id = x.rule_id
WHERE x.id = :id
"""
)


def _record(ctx: JobContext, xid: str, status: str, *, result: Any = None, err: str | None = None) -> None:
    try:
        with ctx.transaction() as conn:
            conn.execute(
                text(
                    "UPDATE automation_executions SET status = :s, result = COALESCE(CAST(:r AS jsonb), result), "
                    "last_error = :e, updated_at = now() WHERE id = :id"
                ),
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


@handlers.register("automation_action")
def automation_action(ctx: JobContext) -> Any:
    xid = (ctx.payload or {}).get("execution_id")
    with ctx.engine.connect() as conn:
        row = conn.execute(_LOAD, {"id": xid}).first()
    if row is None:
        return Skip("the execution no longer exists")
    if row.enabled is None or not row.enabled:
        reason = "the rule was deleted" if row.enabled is None else "the rule is disabled"
        _record(ctx, row.id, "skipped", err=reason)
        return Skip(reason)
    doc = automation.event_document(
        type(
            "Ev", (), {"id": row.event_id, "type": row.type, "instance_id": row.instance_id, "body": row.body}
        )
    )
    kind = row.action["kind"]
    try:
        if kind == "http":
            result = _http(ctx, row, doc)
        elif kind == "start_workflow":
            result = ctx.effect(
                "start",
                lambda c: automation.start_from_event(c, row.namespace_id, row.action, doc, row.rule_id),
            )
        else:
            result = ctx.effect(
                "signal",
                lambda c: automation.signal_from_event(c, row.namespace_id, row.action, doc, row.rule_id),
            )
    except (InvalidArgument, NotFound) as exc:
        _record(ctx, row.id, "dead", err=exc.message if hasattr(exc, "message") else str(exc))
        raise PermanentError(f"{kind} action refused: {exc}") from None
    except Exception as exc:
        final = ctx.attempt >= ctx.max_attempts or isinstance(exc, PermanentError)
        _record(ctx, row.id, "dead" if final else "retrying", err=str(exc))
        raise
    _record(ctx, row.id, "succeeded", result=result)
    return result
