"""marshmallow schemas of the workflow API: start (W-START-1..3), the list query, and the instance and
step objects it answers with (W-START-4, W-STEP)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from marshmallow import ValidationError, fields, post_load, validates_schema

from app.engine.documents import VERSION_RE
from app.engine.finding import ID_PREFIX_RE
from app.engine.instances import MAX_BUSINESS_KEY, MAX_INPUT_BYTES, STATES
from app.ids import is_hex32
from schemas.base import (
    TOO_BIG,
    UNSTORABLE,
    Loose,
    Strict,
    envelope,
    json_bytes,
    json_value,
    page,
    text,
)

HEX32 = r"^[0-9a-f]{32}$"
VERSION = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
KEY = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$")
TIME_FILTERS = ("created_after", "created_before", "updated_after", "updated_before", "deadline_before")


def _pinned_version(v: str) -> str | None:
    if not VERSION_RE.fullmatch(v):
        return "1-64 ASCII characters: a letter or digit first, then also _ . -"
    if v.lower() == "latest":
        return 'a pinned version is required; "latest" is never resolved'
    return None


def _start_input(value: Any) -> str | None:
    size, storable = json_bytes(value)
    if size > MAX_INPUT_BYTES:
        return TOO_BIG
    return None if storable else UNSTORABLE


def _business_key(v: str) -> str | None:
    if len(v) > MAX_BUSINESS_KEY:
        return f"at most {MAX_BUSINESS_KEY} Unicode characters"
    return "must not contain NUL" if "\x00" in v else None


class StartRequest(Strict):
    definition_id = text(
        "must be a 32-char lowercase hex definition id",
        lambda v: None if is_hex32(v) else "must be a 32-char lowercase hex definition id",
        missing="required",
        metadata={"pattern": HEX32},
    )
    version = text(
        "1-64 ASCII characters: a letter or digit first, then also _ . -",
        _pinned_version,
        missing="required",
        metadata={"pattern": VERSION, "description": 'a pinned version ("latest" is never resolved)'},
    )
    input = json_value(_start_input, metadata={"description": "checked against the version's input_schema"})
    business_key = text(
        "must be a string", _business_key, load_default="", metadata={"maxLength": MAX_BUSINESS_KEY}
    )


# --------------------------------------------------------------------------- the list query
class DigitsLimit(fields.Integer):
    """``limit``: decimal digits, 1 to 100 (default 20)."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kw: Any) -> int:
        if not isinstance(value, str) or not value.isdigit() or not 1 <= int(value) <= 100:
            raise ValidationError("an integer from 1 to 100")
        return int(value)


def limit() -> DigitsLimit:
    return DigitsLimit(load_default=20, metadata={"minimum": 1, "maximum": 100})


class RFC3339(fields.DateTime):
    """An RFC 3339 time with an offset (``2026-01-31T08:00:00Z``)."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kw: Any) -> datetime:
        if not isinstance(value, str) or not _TIME_RE.fullmatch(value):
            raise ValidationError("an RFC 3339 time with offset, e.g. 2026-01-31T08:00:00Z")
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValidationError("an RFC 3339 time with offset, e.g. 2026-01-31T08:00:00Z") from None


class TrueFalse(fields.Boolean):
    """``true`` or ``false`` exactly."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kw: Any) -> bool:
        if value not in ("true", "false"):
            raise ValidationError("true or false")
        return value == "true"


def _no_nul_key(v: str) -> str | None:
    return (
        None
        if len(v) <= MAX_BUSINESS_KEY and "\x00" not in v
        else f"at most {MAX_BUSINESS_KEY} characters, no NUL"
    )


class ListQuery(Strict):
    """Filters of ``GET /v1/workflows``; loads as ``{"filters", "limit", "cursor"}``."""

    state = text(
        f"one of {', '.join(STATES)}",
        lambda v: None if v in STATES else f"one of {', '.join(STATES)}",
        metadata={"enum": list(STATES)},
    )
    paused = TrueFalse()
    definition_id = text(
        "a 32-char lowercase hex id",
        lambda v: None if is_hex32(v) else "a 32-char lowercase hex id",
        metadata={"pattern": HEX32},
    )
    version = text(
        "invalid version",
        lambda v: None if VERSION_RE.fullmatch(v) else "invalid version",
        metadata={"pattern": VERSION},
    )
    business_key = text("a string", _no_nul_key, metadata={"maxLength": MAX_BUSINESS_KEY})
    business_key_prefix = text(
        "a string",
        _no_nul_key,
        metadata={
            "maxLength": MAX_BUSINESS_KEY,
            "description": "business keys that start with it, in any case",
        },
    )
    id_prefix = text(
        "8 to 32 hex characters",
        lambda v: None if ID_PREFIX_RE.fullmatch(v.lower()) else "8 to 32 hex characters",
        metadata={"pattern": "^[0-9a-fA-F]{8,32}$", "description": "workflows whose id starts with it"},
    )
    failed_step = text(
        "a step key",
        lambda v: None if re.fullmatch(KEY, v) else "a step key",
        metadata={"pattern": KEY, "description": "the step the workflow's error names (failure groups)"},
    )
    error_code = text(
        "1-64 characters",
        lambda v: None if 1 <= len(v) <= 64 and "\x00" not in v else "1-64 characters",
        metadata={"maxLength": 64, "description": "the code of the workflow's error (failure groups)"},
    )
    error_group = text(
        "1-300 characters",
        lambda v: None if 1 <= len(v) <= 300 and "\x00" not in v else "1-300 characters",
        metadata={"maxLength": 300, "description": "the normalised message of a failure group"},
    )
    schedule_id = text(
        "a 32-char lowercase hex id",
        lambda v: None if is_hex32(v) else "a 32-char lowercase hex id",
        metadata={"pattern": HEX32, "description": "instances launched by this schedule"},
    )
    created_after = RFC3339()
    created_before = RFC3339()
    updated_after = RFC3339()
    updated_before = RFC3339()
    deadline_before = RFC3339()
    limit = limit()
    cursor = fields.String()

    @validates_schema(skip_on_field_errors=False)
    def _exact_or_prefix(self, data: dict[str, Any], **kw: Any) -> None:
        if "business_key" in data and "business_key_prefix" in data:
            raise ValidationError(
                "use business_key (exact) or business_key_prefix, not both", "business_key_prefix"
            )

    @post_load
    def _split(self, data: dict[str, Any], **kw: Any) -> dict[str, Any]:
        limit_, cursor = data.pop("limit"), data.pop("cursor", None)
        return {"filters": data, "limit": limit_, "cursor": cursor}


# --------------------------------------------------------------------------- responses
class Instance(Loose):
    id = fields.String(required=True, metadata={"pattern": HEX32})
    namespace_id = fields.String(required=True)
    definition_id = fields.String(required=True)
    definition_version_id = fields.String(required=True)
    version = fields.String(required=True)
    state = fields.String(required=True, metadata={"enum": list(STATES)})
    revision = fields.String(required=True, metadata={"description": "uint64 as a decimal string"})
    paused = fields.Boolean(required=True)
    control_revision = fields.String(required=True, metadata={"description": "uint64 as a decimal string"})
    input = fields.Raw(required=True, allow_none=True)
    business_key = fields.String(required=True)
    deadline_at = fields.DateTime(required=True)
    created_at = fields.DateTime(required=True)
    updated_at = fields.DateTime(required=True)
    output = fields.Raw(allow_none=True)
    cancel_requested_at = fields.DateTime()
    stop_requested_at = fields.DateTime()
    completed_at = fields.DateTime()
    stop_kind = fields.String()
    schedule_id = fields.String(metadata={"description": "the schedule that launched the instance"})
    schedule_fire_at = fields.DateTime(metadata={"description": "the fire time it was launched for"})


class InstanceResult(Loose):
    instance = fields.Nested(Instance, required=True)
    deduplicated = fields.Boolean(required=True)


InstancePage = page(Instance, "InstancePage")


class StepSummary(Loose):
    id = fields.String(required=True)
    key = fields.String(required=True)
    kind = fields.String(
        required=True, metadata={"enum": ["TASK", "SIGNAL", "TIMER", "POLL", "SUBWORKFLOW", "TRIGGER"]}
    )
    state = fields.String(required=True)
    revision = fields.String(required=True)
    after = fields.List(
        fields.String(), metadata={"description": "the steps it waits for (the graph's edges)"}
    )
    activation_id = fields.String()
    activation_sequence = fields.Integer()
    task_id = fields.String()
    skip_reason = fields.String(metadata={"enum": ["CONDITION_FALSE", "DEPENDENCIES_SKIPPED"]})


class Steps(Loose):
    instance_id = fields.String(required=True)
    revision = fields.String(required=True)
    steps = fields.List(fields.Nested(StepSummary), required=True)


class PollProgress(Loose):
    used_rounds = fields.Integer()
    first_round = fields.Integer()
    first_round_attempts_used = fields.Integer()
    max_rounds = fields.Integer()
    max_attempts_per_round = fields.Integer()
    interval_ms = fields.Integer()
    deadline_at = fields.DateTime(allow_none=True)
    last_task_id = fields.String(allow_none=True)
    current_task_id = fields.String()
    next_poll_at = fields.DateTime()
    resolved_at = fields.DateTime()


class Wait(Loose):
    id = fields.String(required=True)
    kind = fields.String(required=True)
    state = fields.String(required=True)
    name = fields.String()
    payload_version = fields.String()
    correlation_key = fields.String()
    deadline_at = fields.DateTime(allow_none=True)
    winner_signal_id = fields.String()
    resolved_at = fields.DateTime()
    paused = fields.Boolean()  # the workflow is paused: the wait's clock stands still
    remaining_ms = fields.Integer()  # while paused: the time the wait has left


class FanOutElement(Loose):
    index = fields.Integer(required=True)
    task_id = fields.String(required=True)
    state = fields.String(required=True)
    attempt = fields.Integer(required=True)


class FanOutProgress(Loose):
    total = fields.Integer(required=True)
    pending = fields.Integer(required=True, metadata={"description": "elements not started yet"})
    running = fields.Integer(required=True)
    done = fields.Integer(required=True)
    failed = fields.Integer(required=True)
    max_parallel = fields.Integer(required=True)
    elements = fields.List(fields.Nested(FanOutElement), required=True)


class SkipReason(Loose):
    code = fields.String(required=True, metadata={"enum": ["CONDITION_FALSE", "DEPENDENCIES_SKIPPED"]})
    message = fields.String(required=True)


class StepDetail(Loose):
    instance_id = fields.String(required=True)
    revision = fields.String(required=True)
    step = fields.Nested(StepSummary, required=True)
    input = fields.Raw(allow_none=True)
    output = fields.Raw(allow_none=True)
    error = fields.Raw(allow_none=True)
    activated_at = fields.DateTime()
    completed_at = fields.DateTime()
    child_workflow_id = fields.String()
    next_attempt_at = fields.DateTime()
    attempts = fields.Integer(
        metadata={"description": "a TASK step: the attempts its activation took so far"}
    )
    last_failed_attempt = fields.Dict(
        metadata={"description": "a TASK step: its last failed or timed-out attempt, {attempt, state, error}"}
    )
    next_attempt_remaining_ms = fields.Integer()  # while paused: the retry backoff's time left
    poll = fields.Nested(PollProgress)
    wait = fields.Nested(Wait)
    skipped = fields.Nested(SkipReason)
    fan_out = fields.Nested(FanOutProgress)


InstanceResponse = envelope(Instance, "InstanceResponse")
InstanceResultResponse = envelope(InstanceResult, "InstanceResultResponse")
InstancePageResponse = envelope(InstancePage, "InstancePageResponse")
StepsResponse = envelope(Steps, "StepsResponse")
StepDetailResponse = envelope(StepDetail, "StepDetailResponse")
