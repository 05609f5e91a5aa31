"""marshmallow schemas of the operator actions on workflows (issue 47): rerun, batch actions, failure
groups. The loaded values are what ``app.engine.rerun``, ``app.engine.batch`` and
``app.engine.failure_groups`` take."""

from __future__ import annotations

import re
from typing import Any

from marshmallow import ValidationError, fields, post_load, validates_schema

from app.engine.batch import ACTIONS
from app.engine.documents import VERSION_RE
from app.ids import is_hex32
from schemas.base import Boolean, Loose, Strict, envelope, reason, text
from schemas.workflows import HEX32, KEY, VERSION, Instance, ListQuery, limit

STEP = "a step key"
HEX_ID = "a 32-char lowercase hex workflow id"


def _step() -> fields.String:
    return text(
        STEP,
        lambda v: None if re.fullmatch(KEY, v) else STEP,
        allow_none=True,
        metadata={"pattern": KEY, "description": "rerun from this step (null or absent: from the start)"},
    )


def _version() -> fields.String:
    return text(
        "invalid version",
        lambda v: None if VERSION_RE.fullmatch(v) else "invalid version",
        metadata={"pattern": VERSION, "description": "a published version (absent: the old workflow's)"},
    )


class RerunRequest(Strict):
    reason = reason()
    from_step = _step()
    version = _version()


class BatchRequest(Strict):
    action = text(
        f"one of {', '.join(ACTIONS)}",
        lambda v: None if v in ACTIONS else f"one of {', '.join(ACTIONS)}",
        missing=f"required: one of {', '.join(ACTIONS)}",
        metadata={"enum": list(ACTIONS)},
    )
    ids = fields.List(
        text(HEX_ID, lambda v: None if is_hex32(v) else HEX_ID, metadata={"pattern": HEX32}),
        error_messages={"invalid": "an array of workflow ids", "null": "an array of workflow ids"},
        metadata={"description": "the selection (or `filter`)"},
    )
    filter = fields.Nested(
        ListQuery,
        metadata={"description": "the filters of GET /v1/workflows (or `ids`); acts on the newest matches"},
    )
    reason = reason()
    preview = Boolean(load_default=False, metadata={"description": "true: only say what would change"})
    from_step = _step()
    version = _version()

    @validates_schema(skip_on_field_errors=False)
    def _one_selection(self, data: dict[str, Any], **kw: Any) -> None:
        if ("ids" in data) == ("filter" in data):
            raise ValidationError("give either ids or filter", "ids")
        if "ids" in data and not data["ids"]:
            raise ValidationError("at least one workflow id", "ids")
        if data.get("action") != "RERUN" and ("from_step" in data or "version" in data):
            raise ValidationError("only a RERUN takes from_step and version", "from_step")

    @post_load
    def _filters(self, data: dict[str, Any], **kw: Any) -> dict[str, Any]:
        if "filter" in data:
            data["filter"] = data["filter"]["filters"]
        return data


class GroupsQuery(Strict):
    definition_id = text(
        "a 32-char lowercase hex id",
        lambda v: None if is_hex32(v) else "a 32-char lowercase hex id",
        metadata={"pattern": HEX32},
    )
    limit = limit()


# --------------------------------------------------------------------------- responses
class RerunLink(Loose):
    id = fields.String(required=True)
    from_step = fields.String(allow_none=True)
    reason = fields.String(required=True)
    actor_id = fields.String(required=True)
    copied_steps = fields.List(fields.String(), required=True)
    created_at = fields.DateTime(required=True)


class LinkedInstance(Instance):
    rerun_of = fields.Nested(RerunLink, metadata={"description": "the workflow this one reruns"})
    reruns = fields.List(fields.Nested(RerunLink), metadata={"description": "its newest reruns (20)"})


class RerunResult(Loose):
    instance = fields.Nested(Instance, required=True)
    rerun_of = fields.String(required=True)
    from_step = fields.String(allow_none=True)
    copied_steps = fields.List(fields.String(), required=True)
    operation_id = fields.String(required=True)


class BatchSkip(Loose):
    id = fields.String(required=True)
    status = fields.String(allow_none=True, required=True)
    reason = fields.String(required=True)


class BatchResult(Loose):
    operation_id = fields.String(allow_none=True, required=True)
    action = fields.String(required=True)
    preview = fields.Boolean(required=True)
    matched = fields.Integer(required=True)
    remaining = fields.Integer(required=True)
    limit = fields.Integer(required=True)
    submitted = fields.Integer(required=True)
    skipped_for_state = fields.Integer(required=True)
    not_found = fields.Integer(required=True)
    submitted_ids = fields.List(fields.String(), required=True)
    skipped = fields.List(fields.Nested(BatchSkip), required=True)
    items = fields.List(fields.Dict(), required=True)


class FailureGroup(Loose):
    definition_id = fields.String(required=True)
    definition_name = fields.String(required=True)
    step_key = fields.String(allow_none=True, required=True)
    error_code = fields.String(allow_none=True, required=True)
    message_group = fields.String(required=True)
    count = fields.Integer(required=True)
    failed = fields.Integer(required=True)
    needs_review = fields.Integer(required=True)
    first_seen = fields.DateTime(required=True, allow_none=True, metadata={"description": "null: none ended"})
    last_seen = fields.DateTime(required=True, allow_none=True)
    sample_messages = fields.List(fields.String(), required=True)
    sample_ids = fields.List(fields.String(), required=True)
    filter = fields.Dict(required=True, metadata={"description": "GET /v1/workflows filters of its members"})
    rerun_filter = fields.Dict(required=True, metadata={"description": "the batch RERUN filter of the group"})


class FailureGroups(Loose):
    groups = fields.List(fields.Nested(FailureGroup), required=True)
    group_count = fields.Integer(required=True)


LinkedInstanceResponse = envelope(LinkedInstance, "LinkedInstanceResponse")
RerunResponse = envelope(RerunResult, "RerunResponse")
BatchResponse = envelope(BatchResult, "WorkflowBatchResponse")
FailureGroupsResponse = envelope(FailureGroups, "FailureGroupsResponse")
