"""marshmallow schemas of the retention of finished workflows: an operator's hold and the preview of what
retention removes next (``app.engine.retention``)."""

from __future__ import annotations

from marshmallow import fields

from schemas.base import Loose, Strict, envelope, reason
from schemas.workflows import RFC3339, DigitsLimit


class HoldRequest(Strict):
    hold_until = RFC3339(
        required=True,
        allow_none=True,
        error_messages={"required": "required: an RFC 3339 time, or null to release the hold"},
        metadata={"description": "keep the workflow at least until then (null: release the hold)"},
    )
    reason = reason()


class Retention(Loose):
    workflow_id = fields.String(required=True)
    state = fields.String(required=True)
    completed_at = fields.String(allow_none=True, metadata={"description": "null while it runs"})
    hold_until = fields.String(allow_none=True)
    retention_days = fields.Float(required=True, metadata={"description": "its namespace's retention"})
    removes_at = fields.String(
        allow_none=True,
        metadata={"description": "when retention may remove it (end + retention, or the hold when later)"},
    )


class HoldResult(Retention):
    operation_id = fields.String(required=True, metadata={"description": "its audit entry"})


class NextRemoval(Retention):
    definition_id = fields.String(required=True)
    version = fields.String(required=True)
    business_key = fields.String(required=True)


class RetentionPreview(Loose):
    retention_days = fields.Float(required=True)
    items = fields.List(fields.Nested(NextRemoval), required=True)


class RetentionQuery(Strict):
    limit = DigitsLimit(load_default=20, metadata={"minimum": 1, "maximum": 100})


HoldResponse = envelope(HoldResult, "HoldResponse")
RetentionPreviewResponse = envelope(RetentionPreview, "RetentionPreviewResponse")
