"""Event subscriptions (SPEC X-EVENT): create, list, read, update, enable / disable, delete,
rotate the signing secret, the delivery log and redelivery. Every mutation writes an audit row in the
caller's transaction. A secret is returned by ``create`` and ``rotate`` only; no read selects it.

A subscription delivers the namespace's events on behalf of its author: the credential that
created it, or the last one that enabled or updated it (``created_by``). Each delivery checks that this
credential is still live and holds ``integrations:manage``; when it is not, the delivery is skipped and
the subscription disables itself saying why (enable it again with a live credential to adopt it)."""

from __future__ import annotations

import base64
import secrets
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app import audit, auth
from app.auth import Principal, Scope
from app.errors import InvalidArgument, NotFound, StateConflict
from app.ids import is_hex32, new_id
from app.integrations import caps
from app.integrations.paging import page, pages
from app.integrations.patterns import validate_patterns
from app.jsonx import rfc3339
from app.ledger import job_actions
from app.ledger.destinations import DestinationForbidden, check
from app.ledger.enqueue import enqueue
from app.observability.logs import redact_url
from app.settings import WEBHOOK_DISABLE_AFTER
from app.sql import query, run

MAX_SUBSCRIPTIONS = 100  # per namespace: bounds every fan-out
DEFAULT_GRACE_SECONDS = 24 * 3600
MAX_GRACE_SECONDS = 7 * 24 * 3600
MAX_REDELIVER = job_actions.MAX_REPLAY
RETRYABLE = ("dead", "failed", "canceled")


def disable_threshold() -> int:
    """Consecutive failed attempts after which a subscription disables itself."""
    return WEBHOOK_DISABLE_AFTER.get()


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` + base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


_COLS = """id, namespace_id, url, event_types, definition_id, description, enabled, disabled_reason,
    consecutive_failures, revision, created_at, updated_at, previous_secret_expires_at,
    (previous_secret IS NOT NULL AND previous_secret_expires_at > now()) AS rotating"""


def view(row: Any) -> dict[str, Any]:
    m = row._mapping
    out = {
        "id": m["id"],
        "url": redact_url(m["url"]),
        "event_types": list(m["event_types"]),
        "definition_id": m["definition_id"],
        "description": m["description"],
        "enabled": m["enabled"],
        "disabled_reason": m["disabled_reason"],
        "consecutive_failures": m["consecutive_failures"],
        "revision": m["revision"],
        "created_at": rfc3339(m["created_at"]),
        "updated_at": rfc3339(m["updated_at"]),
    }
    if m["rotating"]:
        out["previous_secret_expires_at"] = rfc3339(m["previous_secret_expires_at"])
    return out


def check_url(url: Any, field: str = "url") -> str:
    """The destination policy at create / update time: a 400 naming the field."""
    try:
        check(url)
    except DestinationForbidden as exc:
        raise InvalidArgument(str(exc), field=field) from None
    return url


_SUBSCRIPTION_DEFINITION_EXISTS = query(
    "subscription_definition_exists",
    "SELECT 1 FROM workflow_definitions WHERE id = :d AND namespace_id = :ns",
)


def definition_filter(conn: Connection, ns: str, definition_id: str | None) -> str | None:
    """A ``definition_id`` filter (of a subscription or a rule): None, or a definition of ``ns``; any
    other value is a 400 naming ``definition_id``."""
    if definition_id is None:
        return None
    found = (
        run(conn, _SUBSCRIPTION_DEFINITION_EXISTS, {"d": definition_id, "ns": ns}).first()
        if isinstance(definition_id, str) and is_hex32(definition_id)
        else None
    )
    if found is None:
        raise InvalidArgument("no such workflow definition in this namespace", field="definition_id")
    return definition_id


def _audit(
    conn: Connection,
    p: Principal,
    rid: str | None,
    action: str,
    sid: str,
    before: Any,
    after: Any,
    reason: str | None = None,
) -> None:
    audit.record(
        conn,
        principal=p,
        request_id=rid,
        action=action,
        target_type="event_subscription",
        target_id=sid,
        before=before,
        after=after,
        reason=reason,
    )


_SUBSCRIPTION_INSERT = query(
    "subscription_insert",
    f"""
INSERT INTO event_subscriptions (id, namespace_id, url, event_types, definition_id, description, secret,
    created_by)
VALUES (:id, :ns, :url, CAST(:types AS text[]), :def, :desc, :secret, :by) RETURNING {_COLS}""",
)


def create(conn: Connection, p: Principal, rid: str | None, req: dict) -> dict[str, Any]:
    ns = p.namespace_id
    params: dict[str, Any] = {
        "id": new_id(),
        "ns": ns,
        "url": check_url(req["url"]),
        "types": validate_patterns(req["event_types"]),
        "def": definition_filter(conn, ns, req.get("definition_id")),
        "desc": req.get("description") or "",
        "secret": new_secret(),
        "by": p.actor_id,
    }
    caps.reserve(
        conn,
        "event_subscriptions",
        ns,
        MAX_SUBSCRIPTIONS,
        "SUBSCRIPTION_LIMIT",
        f"a namespace has at most {MAX_SUBSCRIPTIONS} subscriptions",
    )
    sid, secret = params["id"], params["secret"]
    row = run(conn, _SUBSCRIPTION_INSERT, params).one()
    out = view(row)
    _audit(conn, p, rid, "event_subscription.create", sid, None, out)
    return {**out, "secret": secret}


_SUBSCRIPTION_READ = query(
    "subscription_read", f"SELECT {_COLS} FROM event_subscriptions WHERE id = :id AND namespace_id = :ns"
)
_SUBSCRIPTION_LOCK = query(
    "subscription_lock",
    f"SELECT {_COLS} FROM event_subscriptions WHERE id = :id AND namespace_id = :ns FOR UPDATE",
)


def _row(conn: Connection, ns: str, sid: str, *, lock: bool = False) -> Any:
    row = (
        run(conn, _SUBSCRIPTION_LOCK if lock else _SUBSCRIPTION_READ, {"id": sid, "ns": ns}).first()
        if is_hex32(sid)
        else None
    )
    if row is None:
        raise NotFound("subscription not found")
    return row


def _lock(conn: Connection, ns: str, sid: str) -> Any:
    return _row(conn, ns, sid, lock=True)


def get(conn: Connection, ns: str, sid: str) -> dict[str, Any]:
    return view(_row(conn, ns, sid))


_SUBSCRIPTIONS_PAGES = pages(
    "subscriptions_page",
    f"SELECT {_COLS} FROM event_subscriptions WHERE namespace_id = :ns {{after}} {{order}}",
)


def list_page(conn: Connection, ns: str, limit: int, cursor: str | None) -> dict[str, Any]:
    return page(
        conn,
        _SUBSCRIPTIONS_PAGES,
        {"ns": ns},
        binding={"ns": ns, "k": "event_subscriptions"},
        limit=limit,
        cursor=cursor,
        view=view,
    )


_UPDATE = (
    """UPDATE event_subscriptions SET {sets}, revision = revision + 1, updated_at = now()
WHERE id = :id RETURNING """
    + _COLS
)
# an update by a person: each field given (its ``set_`` flag) takes its new value; the updater becomes the
# subscription's author
_SUBSCRIPTION_UPDATE = query(
    "subscription_update",
    _UPDATE.format(
        sets="""created_by = :by,
    url = CASE WHEN :set_url THEN CAST(:url AS text) ELSE url END,
    event_types = CASE WHEN :set_types THEN CAST(:types AS text[]) ELSE event_types END,
    definition_id = CASE WHEN :set_def THEN CAST(:def AS text) ELSE definition_id END,
    description = CASE WHEN :set_desc THEN CAST(:desc AS text) ELSE description END"""
    ),
)
_SUBSCRIPTION_ENABLE = query(
    "subscription_enable_by_person",
    _UPDATE.format(
        sets="enabled = true, disabled_reason = NULL, consecutive_failures = 0, created_by = CAST(:by AS text)"
    ),
)
_SUBSCRIPTION_DISABLE = query(
    "subscription_disable_by_person",
    _UPDATE.format(sets="enabled = false, disabled_reason = 'disabled by ' || CAST(:who AS text)"),
)
_SUBSCRIPTION_ROTATE = query(
    "subscription_rotate_secret",
    _UPDATE.format(
        sets="previous_secret = secret, secret = :secret, "
        "previous_secret_expires_at = now() + make_interval(secs => :grace)"
    ),
)


def update(conn: Connection, p: Principal, rid: str | None, sid: str, req: dict) -> dict[str, Any]:
    before = view(_lock(conn, p.namespace_id, sid))
    params: dict[str, Any] = {"id": sid, "by": p.actor_id}
    params.update(set_url="url" in req, set_types="event_types" in req)
    params.update(set_def="definition_id" in req, set_desc="description" in req)
    params["url"] = check_url(req["url"]) if "url" in req else None
    params["types"] = validate_patterns(req["event_types"]) if "event_types" in req else None
    params["def"] = (
        definition_filter(conn, p.namespace_id, req["definition_id"]) if "definition_id" in req else None
    )
    params["desc"] = (req["description"] or "") if "description" in req else None
    if not any(params[k] for k in ("set_url", "set_types", "set_def", "set_desc")):
        raise InvalidArgument("nothing to update: give url, event_types, definition_id or description")
    after = view(run(conn, _SUBSCRIPTION_UPDATE, params).one())
    _audit(conn, p, rid, "event_subscription.update", sid, before, after)
    return after


def set_enabled(
    conn: Connection, p: Principal, rid: str | None, sid: str, enabled: bool, reason: str | None = None
) -> dict[str, Any]:
    """Enable (clears the failure count and the reason; the enabling credential becomes its author) or
    disable (by a person) a subscription; ``reason``, the person's, goes to the audit row."""
    before = view(_lock(conn, p.namespace_id, sid))
    if before["enabled"] == enabled:
        return before
    statement = _SUBSCRIPTION_ENABLE if enabled else _SUBSCRIPTION_DISABLE
    after = view(run(conn, statement, {"id": sid, "who": p.name, "by": p.actor_id}).one())
    _audit(
        conn, p, rid, f"event_subscription.{'enable' if enabled else 'disable'}", sid, before, after, reason
    )
    return after


_SUBSCRIPTION_DELETE = query(
    "subscription_delete",
    "DELETE FROM event_subscriptions WHERE id = :id",
)


_SUBSCRIPTION_DELIVERIES_DELETE = query(
    "subscription_deliveries_delete",
    "DELETE FROM webhook_deliveries d WHERE d.subscription_id = :id AND NOT EXISTS (SELECT 1 FROM "
    "workflow_jobs j WHERE j.id = d.job_id AND j.status IN ('pending', 'running', 'paused'))",
)


def delete(conn: Connection, p: Principal, rid: str | None, sid: str) -> dict[str, Any]:
    """Deleted: its deliveries whose job is still to run (pending, or retrying) are kept until that job
    runs and records ``skipped`` (so a delivery job always finds its row: a missing one is a job that
    names nothing, ``app.integrations.webhooks``); the rest of its delivery log goes with it."""
    before = view(_lock(conn, p.namespace_id, sid))
    run(conn, _SUBSCRIPTION_DELETE, {"id": sid})
    run(conn, _SUBSCRIPTION_DELIVERIES_DELETE, {"id": sid})
    _audit(conn, p, rid, "event_subscription.delete", sid, before, None)
    return {"id": sid, "deleted": True}


def rotate(
    conn: Connection, p: Principal, rid: str | None, sid: str, grace_seconds: int | None
) -> dict[str, Any]:
    """A new secret; the previous one keeps signing (a second signature) for ``grace_seconds``."""
    grace = DEFAULT_GRACE_SECONDS if grace_seconds is None else grace_seconds
    if not 0 <= grace <= MAX_GRACE_SECONDS:
        raise InvalidArgument(f"grace_seconds must be 0-{MAX_GRACE_SECONDS}", field="grace_seconds")
    before = view(_lock(conn, p.namespace_id, sid))
    secret = new_secret()
    after = view(run(conn, _SUBSCRIPTION_ROTATE, {"id": sid, "secret": secret, "grace": grace}).one())
    _audit(conn, p, rid, "event_subscription.rotate_secret", sid, before, after)
    return {**after, "secret": secret}


def author_problem(conn: Connection, credential_id: str | None) -> str | None:
    """Why the subscription's author may no longer have it deliver (revoked, expired), or None."""
    return auth.authority_problem(auth.acting_principal(conn, credential_id), [Scope.INTEGRATIONS_MANAGE])


# ------------------------------------------------------------------ the delivery log and redelivery
# The job is the truth when its executor died without recording (killed mid-delivery, then reclaimed).
STATUS_SQL = """CASE WHEN j.status = 'dead' AND d.status IN ('pending', 'retrying')
    THEN CASE WHEN j.error_code = 'EXTERNAL_OUTCOME_UNKNOWN' THEN 'unknown' ELSE 'dead' END
    ELSE d.status END"""
_DELIVERY_COLS = f"""d.id, d.event_id, d.event_type, {STATUS_SQL} AS status, d.attempts, d.redeliveries, d.response_code,
    d.latency_ms, d.last_error, d.created_at, d.updated_at, d.job_id, j.status AS job_status"""


def delivery_view(row: Any) -> dict[str, Any]:
    m = row._mapping
    return {
        "id": m["id"],
        "event_id": m["event_id"],
        "event_type": m["event_type"],
        "status": m["status"],
        "attempts": m["attempts"],
        "redeliveries": m["redeliveries"],
        "response_code": m["response_code"],
        "latency_ms": m["latency_ms"],
        "last_error": m["last_error"],
        "job_id": None if m["job_id"] is None else str(m["job_id"]),
        "job_status": m["job_status"],
        "created_at": rfc3339(m["created_at"]),
        "updated_at": rfc3339(m["updated_at"]),
    }


_DELIVERIES_PAGES = pages(
    "deliveries_page",
    f"SELECT {_DELIVERY_COLS} FROM webhook_deliveries d LEFT JOIN workflow_jobs j ON j.id = d.job_id "
    "WHERE d.subscription_id = :sid {after} {order}",
    alias="d.",
    newest_first=True,
)


def deliveries(conn: Connection, ns: str, sid: str, limit: int, cursor: str | None) -> dict[str, Any]:
    """The delivery log, newest first."""
    get(conn, ns, sid)
    return page(
        conn,
        _DELIVERIES_PAGES,
        {"sid": sid},
        binding={"ns": ns, "sub": sid, "k": "webhook_deliveries"},
        limit=limit,
        cursor=cursor,
        view=delivery_view,
    )


_DELIVERY_LINKS_READ = query(
    "delivery_links_read",
    "SELECT d.namespace_id, d.subscription_id, s.url, d.event_id, d.event_type, b.instance_id "
    "FROM webhook_deliveries d JOIN event_subscriptions s ON s.id = d.subscription_id "
    "LEFT JOIN workflow_event_batches b ON b.id = left(d.event_id, 29) || '000' "
    "AND b.namespace_id = d.namespace_id "
    "WHERE d.id = :id AND (CAST(:ns AS text) IS NULL OR d.namespace_id = :ns)",
)


def delivery_links(conn: Connection, delivery_id: str, ns: str | None) -> dict[str, Any] | None:
    """What a delivery names, for the page of its ledger job: its namespace, subscription (id and
    endpoint) and event (id, type, the workflow it is of); None when ``delivery_id`` names no delivery
    of ``ns`` (None: of any namespace)."""
    if not isinstance(delivery_id, str) or not is_hex32(delivery_id):
        return None
    row = run(conn, _DELIVERY_LINKS_READ, {"id": delivery_id, "ns": ns}).one_or_none()
    if row is None:
        return None
    return {
        "namespace_id": row.namespace_id,
        "subscription_id": row.subscription_id,
        "url": redact_url(row.url),
        "event_id": row.event_id,
        "event_type": row.event_type,
        "workflow_id": row.instance_id,
    }


_DELIVERY_ENQUEUE = query(
    "delivery_enqueue",
    "UPDATE webhook_deliveries SET job_id = :j, status = 'pending', updated_at = now() WHERE id = :id",
)


def enqueue_delivery(
    conn: Connection, delivery_id: str, key: str, *, delay_ms: float = 0, event_at: datetime | None = None
) -> int:
    """The ``webhook_delivery`` job of a delivery (``key``: its idempotency key; ``event_at``: its event's
    ``created_at`` when known, which the job reads its event by, ``webhooks.event_time``)."""
    payload: dict[str, str] = {"delivery_id": delivery_id}
    if event_at is not None:
        payload["event_at"] = event_at.isoformat()
    job = enqueue(
        conn,
        "webhook_delivery",
        payload,
        idempotency_key=key,
        operation_key=key[:64],
        delay_ms=delay_ms,
    )
    run(conn, _DELIVERY_ENQUEUE, {"j": job.id, "id": delivery_id})
    return job.id


_DELIVERY_SET_PENDING = query(
    "delivery_set_pending",
    "UPDATE webhook_deliveries SET status = 'pending', updated_at = now() WHERE id = :id",
)


_DELIVERY_COUNT_REDELIVERY = query(
    "delivery_count_redelivery",
    "UPDATE webhook_deliveries SET redeliveries = redeliveries + 1 WHERE id = :id RETURNING redeliveries",
)


def _redeliver_locked(
    conn: Connection, row: Any, actor: job_actions.Actor, index: int, rate: int
) -> str | None:
    """A failed / dead / canceled delivery job: the ledger's manual retry (staggered); a delivery that
    succeeded or was skipped: a new job (the same ``webhook-id``, so the receiver can deduplicate)."""
    if row.job_status in RETRYABLE:
        # the caller owns the subscription (checked under its lock) and so its delivery jobs, which
        # carry no workflow instance: the ledger's job scope is widened to exactly this job
        owner = replace(actor, principal=replace(actor.principal, platform=True))
        done = job_actions.batch_retry(conn, [row.job_id], owner, rate=rate, start_index=index)
        if done["submitted"]:
            run(conn, _DELIVERY_SET_PENDING, {"id": row.id})
            return row.id
        return None
    if row.job_status in ("pending", "running", "paused"):
        return None  # already on its way
    n = run(conn, _DELIVERY_COUNT_REDELIVERY, {"id": row.id}).scalar_one()
    enqueue_delivery(
        conn, row.id, f"webhook_delivery:{row.id}:r{n}", delay_ms=job_actions.stagger_ms(index, rate)
    )
    return row.id


_DELIVERY_READ_FOR_REDELIVERY = query(
    "delivery_read_for_redelivery",
    f"SELECT {_DELIVERY_COLS} FROM webhook_deliveries d LEFT JOIN workflow_jobs j ON j.id = d.job_id "
    "WHERE d.id = :id AND d.subscription_id = :sid FOR UPDATE OF d",
)


def redeliver_one(conn: Connection, actor: job_actions.Actor, sid: str, delivery_id: str) -> dict[str, Any]:
    p = actor.principal
    _lock(conn, p.namespace_id, sid)
    row = run(conn, _DELIVERY_READ_FOR_REDELIVERY, {"id": delivery_id, "sid": sid}).first()
    if row is None:
        raise NotFound("delivery not found")
    if _redeliver_locked(conn, row, actor, 0, job_actions.DEFAULT_RATE) is None:
        raise StateConflict("the delivery is already pending or running")
    _audit(
        conn,
        p,
        actor.request_id,
        "webhook_delivery.redeliver",
        sid,
        delivery_view(row),
        {"delivery_id": row.id},
    )
    return {"delivery_id": row.id, "submitted": True}


_DELIVERIES_FAILED_SINCE = query(
    "deliveries_failed_since",
    f"SELECT {_DELIVERY_COLS} FROM webhook_deliveries d LEFT JOIN workflow_jobs j ON j.id = d.job_id "
    f"WHERE d.subscription_id = :sid AND d.created_at >= :since AND {STATUS_SQL} = ANY(:st) "
    "ORDER BY d.created_at, d.id LIMIT :n FOR UPDATE OF d SKIP LOCKED",
)


def redeliver_since(
    conn: Connection,
    actor: job_actions.Actor,
    sid: str,
    since: datetime,
    *,
    include_succeeded: bool = False,
    rate: int = job_actions.DEFAULT_RATE,
) -> dict[str, Any]:
    """Every failed / dead / canceled / skipped delivery (and with ``include_succeeded`` every one)
    created since ``since``, oldest first, at most ``MAX_REDELIVER``, staggered at ``rate`` per second
    (the ledger's replay rate)."""
    p = actor.principal
    _lock(conn, p.namespace_id, sid)
    statuses = ["failed", "dead", "skipped", "unknown", "retrying"] + (
        ["succeeded"] if include_succeeded else []
    )
    rows = run(
        conn, _DELIVERIES_FAILED_SINCE, {"sid": sid, "since": since, "st": statuses, "n": MAX_REDELIVER}
    ).all()
    submitted: list[str] = []
    for row in rows:
        if _redeliver_locked(conn, row, actor, len(submitted), rate):
            submitted.append(row.id)
    _audit(
        conn,
        p,
        actor.request_id,
        "webhook_delivery.redeliver_since",
        sid,
        {"since": rfc3339(since), "matched": len(rows)},
        {"submitted": submitted},
    )
    return {"matched": len(rows), "submitted": len(submitted), "delivery_ids": submitted, "rate": rate}
