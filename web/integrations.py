"""Event subscriptions with their delivery log and redelivery, and automation rules with their execution
log (X-EVENT, X-AUTO); one credential switch (``integration_access``) manages them all."""

from __future__ import annotations

from flask import Blueprint

from app.auth import Scope
from app.db import get_engine
from app.integrations import automation, subscriptions
from app.ledger.job_actions import Actor
from schemas.integrations import (
    CreateRuleRequest,
    CreateSubscriptionRequest,
    DeletedResponse,
    DeliveryPageResponse,
    ExecutionPageResponse,
    ReasonRequest,
    RedeliveredResponse,
    RedeliveredSinceResponse,
    RedeliverSinceRequest,
    RotateRequest,
    RulePageResponse,
    RuleResponse,
    RuleSecretResponse,
    SubscriptionPageResponse,
    SubscriptionResponse,
    SubscriptionSecretResponse,
    UpdateSubscriptionRequest,
)
from schemas.workflow_control import PageQuery
from web.auth import current_principal, requires
from web.http import ok, request_id, success
from web.meta import doc
from web.mutation import idempotent, mutation
from web.strict import body, query

bp = Blueprint("integrations", __name__)
ID = {"type": "string", "pattern": "^[0-9a-f]{32}$"}
SUB = "/v1/event-subscriptions"
RULES = "/v1/automation-rules"
TAGS = ["integrations"]


def _mutate(status: int, fn, *, secret: bool = False):
    """``secret``: the answer shows a signing secret once; its receipt is the calling credential's own
    (``web.mutation.idempotent(per_credential=True)``), so a replay never hands it to another credential."""
    principal = current_principal()

    def work(conn):
        return status, success(fn(conn, principal))

    return idempotent(work, per_credential=secret)


def _read(fn, *args):
    with get_engine().connect() as conn:
        return ok(fn(conn, current_principal().namespace_id, *args))


# --------------------------------------------------------------------------- subscriptions
@bp.post(SUB)
@doc(
    summary="Create an event subscription (the signing secret is shown only in this answer)",
    status=201,
    response=SubscriptionSecretResponse,
    tags=TAGS,
    errors=(400, 401, 403, 409),
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
@body(CreateSubscriptionRequest)
def create_subscription(body: dict):
    return _mutate(201, lambda c, p: subscriptions.create(c, p, request_id(), body), secret=True)


@bp.get(SUB)
@doc(
    summary="List event subscriptions (oldest first, limit 1-100, bound cursor)",
    response=SubscriptionPageResponse,
    tags=TAGS,
    errors=(400, 401, 403),
)
@requires(Scope.INTEGRATIONS_MANAGE)
@query(PageQuery)
def list_subscriptions(query: dict):
    return _read(subscriptions.list_page, query["limit"], query.get("cursor"))


@bp.get(f"{SUB}/<sid>")
@doc(
    summary="Read an event subscription",
    response=SubscriptionResponse,
    tags=TAGS,
    errors=(401, 403, 404),
    path_params={"sid": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
def get_subscription(sid: str):
    return _read(subscriptions.get, sid)


@bp.patch(f"{SUB}/<sid>")
@doc(
    summary="Update url, event_types, definition_id or description",
    response=SubscriptionResponse,
    tags=TAGS,
    errors=(400, 401, 403, 404),
    path_params={"sid": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
@body(UpdateSubscriptionRequest)
def update_subscription(sid: str, body: dict):
    return _mutate(200, lambda c, p: subscriptions.update(c, p, request_id(), sid, body))


@bp.post(f"{SUB}/<sid>/disable")
@doc(
    summary="Disable a subscription (pending deliveries are skipped)",
    response=SubscriptionResponse,
    tags=TAGS,
    errors=(400, 401, 403, 404),
    path_params={"sid": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
@body(ReasonRequest)
def disable_subscription(sid: str, body: dict):
    return _mutate(
        200, lambda c, p: subscriptions.set_enabled(c, p, request_id(), sid, False, body.get("reason"))
    )


@bp.post(f"{SUB}/<sid>/enable")
@doc(
    summary="Enable a subscription (clears the failure count and the reason it was disabled)",
    response=SubscriptionResponse,
    tags=TAGS,
    errors=(400, 401, 403, 404),
    path_params={"sid": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
@body(ReasonRequest)
def enable_subscription(sid: str, body: dict):
    return _mutate(
        200, lambda c, p: subscriptions.set_enabled(c, p, request_id(), sid, True, body.get("reason"))
    )


@bp.delete(f"{SUB}/<sid>")
@doc(
    summary="Delete a subscription (its deliveries still queued are skipped)",
    response=DeletedResponse,
    tags=TAGS,
    errors=(401, 403, 404),
    path_params={"sid": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
def delete_subscription(sid: str):
    return _mutate(200, lambda c, p: subscriptions.delete(c, p, request_id(), sid))


@bp.post(f"{SUB}/<sid>/rotate-secret")
@doc(
    summary="Rotate the signing secret; the previous one also signs for grace_seconds (default 1 day)",
    response=SubscriptionSecretResponse,
    tags=TAGS,
    errors=(400, 401, 403, 404),
    path_params={"sid": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
@body(RotateRequest)
def rotate_secret(sid: str, body: dict):
    return _mutate(
        200,
        lambda c, p: subscriptions.rotate(c, p, request_id(), sid, body.get("grace_seconds")),
        secret=True,
    )


@bp.get(f"{SUB}/<sid>/deliveries")
@doc(
    summary="The delivery log of a subscription (newest first): event, status, attempts, response code, latency",
    response=DeliveryPageResponse,
    tags=TAGS,
    errors=(400, 401, 403, 404),
    path_params={"sid": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@query(PageQuery)
def list_deliveries(sid: str, query: dict):
    return _read(subscriptions.deliveries, sid, query["limit"], query.get("cursor"))


@bp.post(f"{SUB}/<sid>/deliveries/<delivery_id>/redeliver")
@doc(
    summary="Redeliver one delivery (same webhook-id)",
    response=RedeliveredResponse,
    tags=TAGS,
    errors=(400, 401, 403, 404, 409),
    path_params={"sid": ID, "delivery_id": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
@body(ReasonRequest)
def redeliver(sid: str, delivery_id: str, body: dict):
    return _mutate(
        200,
        lambda c, p: subscriptions.redeliver_one(
            c, Actor(p, request_id(), body.get("reason")), sid, delivery_id
        ),
    )


@bp.post(f"{SUB}/<sid>/redeliver")
@doc(
    summary="Redeliver every failed, dead, unknown or skipped delivery since a time (oldest first, at most 500, "
    "staggered at rate per second)",
    response=RedeliveredSinceResponse,
    tags=TAGS,
    errors=(400, 401, 403, 404),
    path_params={"sid": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
@body(RedeliverSinceRequest)
def redeliver_since(sid: str, body: dict):
    return _mutate(
        200,
        lambda c, p: subscriptions.redeliver_since(
            c,
            Actor(p, request_id()),
            sid,
            body["since"],
            include_succeeded=body["include_succeeded"],
            rate=body["rate"],
        ),
    )


# --------------------------------------------------------------------------- automation rules
@bp.post(RULES)
@doc(
    summary="Create an automation rule (an http action's signing secret is shown only in this answer)",
    status=201,
    response=RuleSecretResponse,
    tags=TAGS,
    errors=(400, 401, 403, 409),
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
@body(CreateRuleRequest)
def create_rule(body: dict):
    return _mutate(201, lambda c, p: automation.create_rule(c, p, request_id(), body), secret=True)


@bp.get(RULES)
@doc(
    summary="List automation rules (oldest first, limit 1-100, bound cursor)",
    response=RulePageResponse,
    tags=TAGS,
    errors=(400, 401, 403),
)
@requires(Scope.INTEGRATIONS_MANAGE)
@query(PageQuery)
def list_rules(query: dict):
    return _read(automation.list_rules, query["limit"], query.get("cursor"))


@bp.get(f"{RULES}/<rule_id>")
@doc(
    summary="Read an automation rule",
    response=RuleResponse,
    tags=TAGS,
    errors=(401, 403, 404),
    path_params={"rule_id": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
def get_rule(rule_id: str):
    return _read(automation.get_rule, rule_id)


@bp.post(f"{RULES}/<rule_id>/disable")
@doc(
    summary="Disable an automation rule",
    response=RuleResponse,
    tags=TAGS,
    errors=(400, 401, 403, 404),
    path_params={"rule_id": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
@body(ReasonRequest)
def disable_rule(rule_id: str, body: dict):
    return _mutate(
        200, lambda c, p: automation.set_rule_enabled(c, p, request_id(), rule_id, False, body.get("reason"))
    )


@bp.post(f"{RULES}/<rule_id>/enable")
@doc(
    summary="Enable an automation rule",
    response=RuleResponse,
    tags=TAGS,
    errors=(400, 401, 403, 404),
    path_params={"rule_id": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@mutation
@body(ReasonRequest)
def enable_rule(rule_id: str, body: dict):
    return _mutate(
        200, lambda c, p: automation.set_rule_enabled(c, p, request_id(), rule_id, True, body.get("reason"))
    )


@bp.get(f"{RULES}/<rule_id>/executions")
@doc(
    summary="The execution log of an automation rule (newest first)",
    response=ExecutionPageResponse,
    tags=TAGS,
    errors=(400, 401, 403, 404),
    path_params={"rule_id": ID},
)
@requires(Scope.INTEGRATIONS_MANAGE)
@query(PageQuery)
def list_executions(rule_id: str, query: dict):
    return _read(automation.executions, rule_id, query["limit"], query.get("cursor"))
