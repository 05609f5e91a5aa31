"""The outbound jobs of events (SPEC X-EVENT, L-TYPE): ``event_dispatch`` fans the events of one
transaction out to the matching subscriptions and automation rules, ``webhook_delivery`` POSTs one
event to one subscription, signed the Standard Webhooks way.

Exactly one delivery per (event, subscription): the delivery row is unique per pair and its job's
idempotency key is ``webhook_delivery:<event>:<subscription>``, so a retried dispatch, or one whose
worker was killed mid-way (its transaction never committed), creates nothing twice. The same holds
for rules (``automation_action:<event>:<rule>``).

Delivery outcomes (``app.ledger.http`` with ``receiver_dedups``): 2xx succeeded with a stored
receipt; a connection refused before sending, 408, 429 (after its Retry-After) and 5xx retry with
backoff; other 4xx dead (PERMANENT_ERROR); no answer after the request left: dead, EXTERNAL_OUTCOME_UNKNOWN
(never re-sent automatically); a destination the policy refuses: dead, DESTINATION_FORBIDDEN; a
subscription disabled or deleted by then: the attempt is ``skipped``. Consecutive failed attempts past
``disable_threshold()`` disable the subscription and record why; so does an author (``created_by``)
revoked, expired or without ``integrations:manage`` (the attempt is ``skipped``, nothing is sent).

A job whose payload names a row that does not exist ends ``dead`` with REFERENCE_NOT_FOUND
(a delivery id, or for ``event_dispatch`` an instance, that never existed: a mistyped id in a job enqueued
by hand), unless the row may have been removed by retention since the job was created (the job is older
than the retention window): that is a ``skipped`` attempt, "no longer exists". A subscription's
delivery whose job is still to run is kept when the subscription is deleted, so that case stays a
``skipped`` attempt too.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection
from standardwebhooks.webhooks import Webhook

from app.engine.events import MAX_EVENTS_PER_DISPATCH
from app.ids import is_hex32, new_id
from app.integrations import automation
from app.integrations.patterns import type_matches
from app.integrations.subscriptions import (
    MAX_SUBSCRIPTIONS,
    author_problem,
    disable_threshold,
    enqueue_delivery,
)
from app.ledger import handlers, retention
from app.ledger.context import JobContext
from app.ledger.http import MARKER_WRITE_FAILED
from app.ledger.outcome import (
    ExternalOutcomeUnknown,
    JobAborted,
    PermanentError,
    ReferenceNotFound,
    RetryableError,
    Skip,
)
from app.observability.logs import redact_url
from app.sql import query, run

USER_AGENT = "Ledgerflow-Webhooks/1"


# --------------------------------------------------------------------------- event_dispatch
# The events of dispatch job ``:j``, written by the transaction that enqueued it: their batches' ``created_at``
# is the job's (both are that transaction's ``now()``), so PostgreSQL looks into the one week's partition
# of the event batches that holds them (when it plans with ``:at``, or at the executor's start with a
# prepared generic plan) instead of into each week's dispatch index (a year of weeks: the audit's retention).
_DISPATCH_EVENTS = query(
    "event_dispatch_events",
    "SELECT id, namespace_id, type, definition_id, instance_id, body::text AS body, created_at FROM workflow_events "
    "WHERE dispatch_job_id = :j AND created_at = CAST(:at AS timestamptz) ORDER BY seq LIMIT :n",
)
# a job read without its ``created_at`` (a caller other than the pool): every week's partition
_DISPATCH_EVENTS_ANY_TIME = query(
    "event_dispatch_events_any_time",
    "SELECT id, namespace_id, type, definition_id, instance_id, body::text AS body, created_at FROM workflow_events "
    "WHERE dispatch_job_id = :j ORDER BY seq LIMIT :n",
)
_DISPATCH_SUBSCRIPTIONS = query(
    "event_dispatch_subscriptions",
    "SELECT id, event_types, definition_id FROM event_subscriptions WHERE namespace_id = :ns AND enabled "
    "ORDER BY created_at, id LIMIT :n",
)
_DELIVERY_INSERT = query(
    "webhook_delivery_insert",
    "INSERT INTO webhook_deliveries (id, namespace_id, subscription_id, event_id, event_type) "
    "VALUES (:id, :ns, :s, :e, :t) ON CONFLICT (event_id, subscription_id) DO NOTHING RETURNING id",
)


def fan_out(conn: Connection, job_id: int, created_at: datetime | None = None) -> dict[str, int]:
    """Deliveries and rule executions of the events of dispatch job ``job_id`` (idempotent); ``created_at``:
    the job's, when known (its events are looked up in their partition only)."""
    events = run(
        conn,
        _DISPATCH_EVENTS if created_at is not None else _DISPATCH_EVENTS_ANY_TIME,
        {"j": job_id, "at": created_at, "n": MAX_EVENTS_PER_DISPATCH},
    ).all()
    if not events:
        return {"events": 0, "deliveries": 0, "actions": 0}
    ns = events[0].namespace_id
    # the job's own fan-out, so one instance's events (app.engine.events); a hand-made job is bounded too
    events = [ev for ev in events if ev.instance_id == events[0].instance_id]
    subs = run(
        conn,
        _DISPATCH_SUBSCRIPTIONS,
        {"ns": ns, "n": MAX_SUBSCRIPTIONS},
    ).all()
    rules = automation.enabled_rules(conn, ns)
    deliveries = 0
    for ev in events:
        for s in subs:
            if (s.definition_id and s.definition_id != ev.definition_id) or not type_matches(
                s.event_types, ev.type
            ):
                continue
            did = run(
                conn,
                _DELIVERY_INSERT,
                {"id": new_id(), "ns": ns, "s": s.id, "e": ev.id, "t": ev.type},
            ).scalar()
            if did is not None:
                enqueue_delivery(conn, did, f"webhook_delivery:{ev.id}:{s.id}", event_at=ev.created_at)
                deliveries += 1
    actions = automation.fan_out_events(conn, events, rules)
    return {"events": len(events), "deliveries": deliveries, "actions": actions}


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and is_hex32(value)


def event_time(payload: Any) -> datetime | None:
    """The ``event_at`` of a delivery's or an action's job payload: its event's ``created_at`` (its batch's
    partition key), when the job carries it (one enqueued by a dispatch since it does; not a redelivery)."""
    at = payload.get("event_at") if isinstance(payload, dict) else None
    if not isinstance(at, str):
        return None
    try:
        parsed = datetime.fromisoformat(at)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def missing(ctx: JobContext, what: str, row_id: Any) -> Skip:
    """The answer to a job whose payload names no existing ``what``: a skip when retention may have
    removed it since the job was created, else REFERENCE_NOT_FOUND (raised: the job is dead)."""
    if _is_id(row_id):
        with ctx.engine.connect() as conn:
            if retention.may_have_pruned(conn, ctx.job_id):
                return Skip(f"the {what} no longer exists (removed by retention)")
    raise ReferenceNotFound(f"the job's payload names {what} {str(row_id)[:64]!r}, which does not exist")


_INSTANCE_EXISTS = query(
    "event_dispatch_instance_exists",
    "SELECT 1 FROM workflow_instances WHERE id = :i",
)


@handlers.register("event_dispatch")
def event_dispatch(ctx: JobContext) -> Any:
    result = ctx.effect("fan_out", lambda conn: fan_out(conn, ctx.job_id, ctx.created_at))
    if result["events"]:
        return result
    # no event names this job: fine for an instance that exists (its events were pruned, or none was
    # written); instances are never deleted, so one that does not exist never did
    iid = ctx.instance_id or (ctx.payload or {}).get("instance_id")
    with ctx.engine.connect() as conn:
        found = _is_id(iid) and run(conn, _INSTANCE_EXISTS, {"i": iid}).first()
    if not found:
        raise ReferenceNotFound(f"the job names workflow instance {str(iid)[:64]!r}, which does not exist")
    return Skip("no event names this dispatch job (pruned by retention, or none was written)")


# --------------------------------------------------------------------------- webhook_delivery
def payload_of(ev: Any) -> str:
    """The delivered body: the event as the API shows it (compact, deterministic)."""
    return json.dumps(
        {
            "id": ev.event_id,
            "type": ev.event_type,
            "seq": ev.seq,
            "workflow_id": ev.instance_id,
            "created_at": ev.event_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "data": json.loads(ev.body),
        },
        separators=(",", ":"),
        sort_keys=True,
    )


def signature(secrets_: list[str], msg_id: str, at: datetime, body: str) -> str:
    """``v1,<sig>`` per secret (two during a rotation's grace period), space separated."""
    return " ".join(Webhook(s).sign(msg_id, at, body) for s in secrets_)


_LOAD_SQL = """
SELECT d.id, d.event_id, d.event_type, d.subscription_id, e.seq, e.instance_id, e.body::text AS body,
       e.created_at AS event_at, s.url, s.secret, s.enabled, s.created_by,
       CASE WHEN s.previous_secret_expires_at > now() THEN s.previous_secret END AS previous_secret
FROM webhook_deliveries d
JOIN workflow_events e ON e.batch_id = left(d.event_id, 29) || '000' AND e.id = d.event_id{at}
LEFT JOIN event_subscriptions s ON s.id = d.subscription_id
WHERE d.id = :id
"""
# The delivery and its event. With the event's time (``event_time`` of the job's payload) PostgreSQL looks
# into the one week's partition of the event batches that holds it (when it plans with ``:at``, or at the
# executor's start with a prepared generic plan), not into each week's key; without (a redelivery), every week.
_LOAD_AT = query(
    "webhook_delivery_load_at", _LOAD_SQL.format(at=" AND e.created_at = CAST(:at AS timestamptz)")
)
_LOAD = query("webhook_delivery_load", _LOAD_SQL.format(at=""))

_RECORD = query(
    "webhook_delivery_record",
    """
UPDATE webhook_deliveries SET status = :st, attempts = attempts + 1, response_code = :code,
    latency_ms = :ms, last_error = :err, receipt = COALESCE(CAST(:receipt AS jsonb), receipt), updated_at = now()
WHERE id = :id
""",
)


def _record(
    ctx: JobContext,
    row: Any,
    status: str,
    *,
    code: int | None,
    ms: int | None,
    err: str | None,
    receipt: Any = None,
    failed: bool = False,
) -> None:
    """The attempt's result on the delivery row and the subscription's failure count (auto-disable)."""
    try:
        _write_record(ctx, row, status, code=code, ms=ms, err=err, receipt=receipt, failed=failed)
    except JobAborted:
        pass  # ownership lost: the next owner records its own attempt


_COUNT_FAILURE = query(
    "subscription_count_failure",
    """
UPDATE event_subscriptions SET consecutive_failures = consecutive_failures + 1,
    enabled = CASE WHEN consecutive_failures + 1 >= :limit THEN false ELSE enabled END,
    disabled_reason = CASE WHEN enabled AND consecutive_failures + 1 >= :limit
        THEN 'disabled automatically after ' || (consecutive_failures + 1) || ' consecutive failed deliveries; last: '
             || CAST(:err AS text) ELSE disabled_reason END,
    revision = revision + CASE WHEN enabled AND consecutive_failures + 1 >= :limit THEN 1 ELSE 0 END,
    updated_at = now()
WHERE id = :s
""",
)
_CLEAR_FAILURES = query(
    "subscription_clear_failures",
    "UPDATE event_subscriptions SET consecutive_failures = 0 WHERE id = :s AND consecutive_failures > 0",
)


def _write_record(
    ctx: JobContext,
    row: Any,
    status: str,
    *,
    code: int | None,
    ms: int | None,
    err: str | None,
    receipt: Any,
    failed: bool,
) -> None:
    with ctx.transaction() as conn:
        run(
            conn,
            _RECORD,
            {
                "id": row.id,
                "st": status,
                "code": code,
                "ms": ms,
                "err": err and err[:2000],
                "receipt": None if receipt is None else json.dumps(receipt),
            },
        )
        if failed:
            run(
                conn,
                _COUNT_FAILURE,
                {"s": row.subscription_id, "limit": disable_threshold(), "err": (err or "")[:500]},
            )
        elif status == "succeeded":
            run(
                conn,
                _CLEAR_FAILURES,
                {"s": row.subscription_id},
            )


_DELIVERY_SKIP = query(
    "webhook_delivery_skip",
    "UPDATE webhook_deliveries SET status = 'skipped', last_error = :r, updated_at = now() WHERE id = :id",
)
_SUBSCRIPTION_DISABLE = query(
    "subscription_disable",
    "UPDATE event_subscriptions SET enabled = false, disabled_reason = :r, revision = revision + 1, "
    "updated_at = now() WHERE id = :s AND enabled",
)


@handlers.register("webhook_delivery")
def webhook_delivery(ctx: JobContext) -> Any:
    delivery_id = (ctx.payload or {}).get("delivery_id")
    at = event_time(ctx.payload)
    with ctx.engine.connect() as conn:
        load = _LOAD if at is None else _LOAD_AT
        row = run(conn, load, {"id": delivery_id, "at": at}).first() if _is_id(delivery_id) else None
        author = None if row is None or row.url is None else author_problem(conn, row.created_by)
    if row is None:
        return missing(ctx, "webhook delivery", delivery_id)
    if row.url is None or not row.enabled or author is not None:
        reason = (
            "the subscription was deleted"
            if row.url is None
            else "the subscription is disabled"
            if not row.enabled
            else f"the subscription's author may no longer have it deliver: {author}"
        )
        with ctx.transaction() as conn:
            run(
                conn,
                _DELIVERY_SKIP,
                {"id": row.id, "r": reason},
            )
            if author is not None:
                run(
                    conn,
                    _SUBSCRIPTION_DISABLE,
                    {"s": row.subscription_id, "r": f"disabled automatically: {reason}"[:1000]},
                )
        return Skip(reason)
    body = payload_of(row)
    at = datetime.now(UTC)
    secrets_ = [row.secret] + ([row.previous_secret] if row.previous_secret else [])
    headers = {
        "webhook-id": row.event_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature(secrets_, row.event_id, at, body),
        "X-Idempotency-Key": f"{row.event_id}.{row.subscription_id}",
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
    }
    started = time.monotonic()
    try:
        res = ctx.http.request(
            "POST", row.url, step_key="deliver", content=body, headers=headers, receiver_dedups=True
        )
    except RetryableError as exc:
        if exc.code == MARKER_WRITE_FAILED:
            raise  # PostgreSQL was lost before the request left: no attempt of the subscriber's to record
        final = ctx.attempt >= ctx.max_attempts
        _record(
            ctx,
            row,
            "dead" if final else "retrying",
            code=_status_of(exc),
            ms=_ms(started),
            err=str(exc),
            failed=True,
        )
        raise
    except ExternalOutcomeUnknown as exc:
        _record(ctx, row, "unknown", code=_status_of(exc), ms=_ms(started), err=str(exc), failed=True)
        raise
    except PermanentError as exc:
        _record(ctx, row, "dead", code=_status_of(exc), ms=_ms(started), err=str(exc), failed=True)
        raise
    receipt = {"status_code": res.status_code, "body": res.text[:1024], "reused": res.reused}
    _record(ctx, row, "succeeded", code=res.status_code, ms=_ms(started), err=None, receipt=receipt)
    return {"delivery_id": row.id, "status_code": res.status_code, "url": redact_url(row.url)}


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status named in a failure message (``HTTP 503``), if any."""
    words = str(exc).split("HTTP ")
    if len(words) > 1 and words[1][:3].isdigit():
        return int(words[1][:3])
    return None
