"""marshmallow schemas of event subscriptions, webhook deliveries and automation rules (X-EVENT,
X-AUTO). The loaded values are what ``app.integrations.subscriptions`` / ``automation`` take; the
event-type patterns, URLs (destination policy), conditions and actions are checked there."""

from __future__ import annotations

from marshmallow import fields

from schemas.base import Boolean, Loose, Strict, envelope, integer, text

HEX32 = "^[0-9a-f]{32}$"


def _desc(v: str) -> str | None:
    return None if len(v) <= 1000 and "\x00" not in v else "at most 1000 characters, no NUL"


def _name(v: str) -> str | None:
    return None if 1 <= len(v) <= 128 and "\x00" not in v else "1-128 characters, no NUL"


EVENT_TYPES = fields.List(
    fields.String(),
    metadata={"description": "event types: a type, <family>.* (workflow, step, task, signal) or *"},
)
URL = text("an http(s) URL", metadata={"maxLength": 2048, "format": "uri"})
DEFINITION = fields.String(
    allow_none=True, metadata={"pattern": HEX32, "description": "only this definition's events"}
)


class CreateSubscriptionRequest(Strict):
    url = text("an http(s) URL", missing="required: an http(s) URL", metadata={"maxLength": 2048})
    event_types = fields.List(fields.String(), required=True, metadata=EVENT_TYPES.metadata)
    definition_id = DEFINITION
    description = text("at most 1000 characters", _desc, load_default="", metadata={"maxLength": 1000})


class UpdateSubscriptionRequest(Strict):
    url = URL
    event_types = fields.List(fields.String(), metadata=EVENT_TYPES.metadata)
    definition_id = DEFINITION
    description = text("at most 1000 characters", _desc, metadata={"maxLength": 1000})


class ReasonRequest(Strict):
    reason = text(
        "at most 1000 characters",
        _desc,
        load_default=None,
        allow_none=True,
        metadata={"maxLength": 1000, "description": "why (audited)"},
    )


class RotateRequest(Strict):
    grace_seconds = integer(0, 7 * 24 * 3600, "0-604800 seconds", metadata={"description": "default 86400"})


class RedeliverSinceRequest(Strict):
    since = fields.AwareDateTime(
        required=True, metadata={"description": "deliveries created at or after this time"}
    )
    include_succeeded = Boolean(load_default=False)
    rate = integer(1, 100, "1-100 per second", load_default=20)


class Subscription(Loose):
    id = fields.String(required=True)
    url = fields.String(required=True, metadata={"description": "user info and query values redacted"})
    event_types = fields.List(fields.String(), required=True)
    definition_id = fields.String(allow_none=True)
    description = fields.String(required=True)
    enabled = fields.Boolean(required=True)
    disabled_reason = fields.String(allow_none=True)
    consecutive_failures = fields.Integer(required=True)
    revision = fields.Integer(required=True)
    created_at = fields.String(required=True)
    updated_at = fields.String(required=True)
    previous_secret_expires_at = fields.String()


class SubscriptionWithSecret(Subscription):
    secret = fields.String(required=True, metadata={"description": "shown only now (whsec_...)"})


class SubscriptionPage(Loose):
    items = fields.List(fields.Nested(Subscription), required=True)
    next_cursor = fields.String()


class Delivery(Loose):
    id = fields.String(required=True)
    event_id = fields.String(required=True)
    event_type = fields.String(required=True)
    status = fields.String(
        required=True, metadata={"enum": ["pending", "succeeded", "retrying", "dead", "unknown", "skipped"]}
    )
    attempts = fields.Integer(required=True)
    redeliveries = fields.Integer(required=True)
    response_code = fields.Integer(allow_none=True)
    latency_ms = fields.Integer(allow_none=True)
    last_error = fields.String(allow_none=True)
    job_id = fields.String(allow_none=True)
    job_status = fields.String(allow_none=True)
    created_at = fields.String(required=True)
    updated_at = fields.String(required=True)


class DeliveryPage(Loose):
    items = fields.List(fields.Nested(Delivery), required=True)
    next_cursor = fields.String()


class Deleted(Loose):
    id = fields.String(required=True)
    deleted = fields.Boolean(required=True)


class Redelivered(Loose):
    delivery_id = fields.String(required=True)
    submitted = fields.Boolean(required=True)


class RedeliveredSince(Loose):
    matched = fields.Integer(required=True)
    submitted = fields.Integer(required=True)
    delivery_ids = fields.List(fields.String(), required=True)
    rate = fields.Integer(required=True)


# --------------------------------------------------------------------------- automation rules
class Condition(Strict):
    path = fields.String(
        required=True, metadata={"description": "dotted path in the event document, e.g. data.instance.state"}
    )
    op = fields.String(required=True, metadata={"enum": ["eq", "ne", "in", "exists"]})
    value = fields.Raw(allow_none=True, metadata={"description": "any JSON value (a list for in)"})


class CreateRuleRequest(Strict):
    name = text("1-128 characters", _name, missing="required: 1-128 characters", metadata={"maxLength": 128})
    event_type = text("an event type, <family>.* or *", missing="required: an event type")
    definition_id = DEFINITION
    conditions = fields.List(fields.Nested(Condition), load_default=list)
    action = fields.Dict(
        required=True,
        metadata={
            "description": "{kind: http, url} | {kind: start_workflow, definition_id, version, input, "
            "business_key} | {kind: signal, workflow_id, name, payload_version, target_step_key, "
            "target_activation_sequence, correlation_key, payload}; strings $.event... map the event"
        },
    )


class Rule(Loose):
    id = fields.String(required=True)
    name = fields.String(required=True)
    event_type = fields.String(required=True)
    definition_id = fields.String(allow_none=True)
    conditions = fields.List(fields.Dict(), required=True)
    action = fields.Dict(
        required=True, metadata={"description": "an http action's URL: user info and query values redacted"}
    )
    enabled = fields.Boolean(required=True)
    disabled_reason = fields.String(
        allow_none=True,
        metadata={
            "description": "why it disabled itself (rate budget, its author's rights), or who disabled it"
        },
    )
    revision = fields.Integer(required=True)
    created_at = fields.String(required=True)
    updated_at = fields.String(required=True)


class RuleWithSecret(Rule):
    secret = fields.String(metadata={"description": "http actions: the signing secret, shown only now"})


class RulePage(Loose):
    items = fields.List(fields.Nested(Rule), required=True)
    next_cursor = fields.String()


class Execution(Loose):
    id = fields.String(required=True)
    event_id = fields.String(required=True)
    status = fields.String(required=True)
    result = fields.Raw(allow_none=True)
    last_error = fields.String(allow_none=True)
    job_id = fields.String(allow_none=True)
    job_status = fields.String(allow_none=True)
    attempts = fields.Integer(required=True)
    created_at = fields.String(required=True)
    updated_at = fields.String(required=True)


class ExecutionPage(Loose):
    items = fields.List(fields.Nested(Execution), required=True)
    next_cursor = fields.String()


SubscriptionResponse = envelope(Subscription, "SubscriptionResponse")
SubscriptionSecretResponse = envelope(SubscriptionWithSecret, "SubscriptionSecretResponse")
SubscriptionPageResponse = envelope(SubscriptionPage, "SubscriptionPageResponse")
DeliveryPageResponse = envelope(DeliveryPage, "DeliveryPageResponse")
DeletedResponse = envelope(Deleted, "SubscriptionDeletedResponse")
RedeliveredResponse = envelope(Redelivered, "RedeliveredResponse")
RedeliveredSinceResponse = envelope(RedeliveredSince, "RedeliveredSinceResponse")
RuleResponse = envelope(Rule, "AutomationRuleResponse")
RuleSecretResponse = envelope(RuleWithSecret, "AutomationRuleCreatedResponse")
RulePageResponse = envelope(RulePage, "AutomationRulePageResponse")
ExecutionPageResponse = envelope(ExecutionPage, "AutomationExecutionPageResponse")
