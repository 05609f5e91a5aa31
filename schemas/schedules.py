"""marshmallow schemas of the schedules API (X-SCHED): create, update, the list query, and the
schedule / fire objects it answers with. Rule semantics (cron, zone, interval) are checked by
``app.integrations.schedules`` so the API and the CLI give the same 400s."""

from __future__ import annotations

import re

from marshmallow import fields

from app.auth import NAME_RE
from app.integrations.schedule_models import OVERLAP_POLICIES
from app.integrations.schedule_times import MAX_CRON_CHARS, MAX_INTERVAL_SECONDS, MIN_INTERVAL_SECONDS
from schemas.base import Boolean, Loose, Strict, envelope, integer, json_value, page, text
from schemas.workflows import HEX32, KEY, limit

_NAME = "1-64 characters: a letter or digit first, then also . _ -"
_KEY_RE = re.compile(KEY)
_FIELD_NAME = "1-64 characters: a letter or digit first, then also _ -"


def _overlap(v: str) -> str | None:
    return None if v in OVERLAP_POLICIES else f"one of {', '.join(OVERLAP_POLICIES)}"


def _cron(v: str) -> str | None:
    return None if 1 <= len(v) <= MAX_CRON_CHARS else f"1-{MAX_CRON_CHARS} characters"


def _fields(required: bool) -> dict[str, fields.Field]:
    req = "required" if required else None
    return {
        "definition_id": text(
            "a 32-char lowercase hex definition id", missing=req, metadata={"pattern": HEX32}
        ),
        "version": text("a pinned version", missing=req, metadata={"description": 'never "latest"'}),
        "input": json_value(missing="required (explicit null is a value)" if required else None),
        "fire_time_field": text(
            _FIELD_NAME,
            lambda v: None if _KEY_RE.match(v) else _FIELD_NAME,
            allow_none=True,
            metadata={"description": "input key that receives the fire time (RFC 3339)"},
        ),
        "cron": text(
            "a 5-field cron expression or an @alias",
            _cron,
            allow_none=True,
            metadata={
                "description": "5 fields or @yearly @monthly @weekly @daily @hourly",
                "example": "30 8 * * 1-5",
            },
        ),
        "timezone": text("an IANA time zone name", metadata={"example": "Europe/Berlin"}),
        "interval_seconds": integer(
            MIN_INTERVAL_SECONDS,
            MAX_INTERVAL_SECONDS,
            f"an integer from {MIN_INTERVAL_SECONDS} to {MAX_INTERVAL_SECONDS}",
            allow_none=True,
        ),
        "overlap": text(
            f"one of {', '.join(OVERLAP_POLICIES)}", _overlap, metadata={"enum": list(OVERLAP_POLICIES)}
        ),
    }


CreateScheduleRequest = Strict.from_dict(
    {
        "name": text(_NAME, lambda v: None if NAME_RE.match(v) else _NAME, missing="required"),
        "paused": Boolean(load_default=False),
        **_fields(True),
    },
    name="CreateScheduleRequest",
)
UpdateScheduleRequest = Strict.from_dict(_fields(False), name="UpdateScheduleRequest")


class ScheduleActionRequest(Strict):
    """Body of pause / resume / launch: an optional reason for the audit (``{}`` is fine)."""

    reason = text(
        "at most 1024 characters",
        lambda v: None if len(v) <= 1024 and "\x00" not in v else "at most 1024 characters",
        load_default=None,
        allow_none=True,
        metadata={"maxLength": 1024, "description": "why (written to the audit)"},
    )


class FiresQuery(Strict):
    limit = limit()


class ListSchedulesQuery(Strict):
    limit = limit()
    cursor = fields.String()


class Fire(Loose):
    id = fields.String(required=True)
    fire_at = fields.DateTime(required=True)
    kind = fields.String(required=True, metadata={"enum": ["SCHEDULED", "MANUAL"]})
    status = fields.String(required=True, metadata={"enum": ["LAUNCHED", "SKIPPED"]})
    skipped_missed = fields.Integer(
        required=True, metadata={"description": "missed fire times coalesced into it"}
    )
    skipped_missed_capped = fields.Boolean(required=True)
    reason = fields.String()
    instance_id = fields.String()
    created_at = fields.DateTime(required=True)


class Schedule(Loose):
    id = fields.String(required=True)
    name = fields.String(required=True)
    definition_id = fields.String(required=True)
    version = fields.String(required=True)
    input = fields.Raw(required=True, allow_none=True)
    fire_time_field = fields.String()
    cron = fields.String()
    timezone = fields.String(required=True)
    interval_seconds = fields.Integer()
    overlap = fields.String(required=True)
    paused = fields.Boolean(required=True)
    revision = fields.String(required=True)
    next_fire_at = fields.DateTime(required=True)
    next_fire_times = fields.List(fields.DateTime(), required=True)
    last_fire = fields.Nested(Fire)
    created_at = fields.DateTime(required=True)
    updated_at = fields.DateTime(required=True)


class Missed(Loose):
    fire_times = fields.Integer(required=True)
    skipped = fields.Integer(required=True)
    capped = fields.Boolean(required=True)
    coalesced_into = fields.DateTime(required=True)


class PauseResult(Loose):
    schedule = fields.Nested(Schedule, required=True)
    missed = fields.Nested(Missed, allow_none=True, required=True)


class LaunchResult(Loose):
    schedule_id = fields.String(required=True)
    fire_at = fields.DateTime(required=True)
    job_id = fields.String(required=True)


class Deleted(Loose):
    id = fields.String(required=True)
    deleted = fields.Boolean(required=True)


ScheduleResponse = envelope(Schedule, "ScheduleResponse")
SchedulePageResponse = envelope(page(Schedule, "SchedulePage"), "SchedulePageResponse")
FirePageResponse = envelope(page(Fire, "FirePage"), "FirePageResponse")
PauseResponse = envelope(PauseResult, "PauseScheduleResponse")
LaunchResponse = envelope(LaunchResult, "LaunchScheduleResponse")
DeletedResponse = envelope(Deleted, "DeletedScheduleResponse")
