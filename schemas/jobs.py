"""marshmallow schemas of the job ledger operator API (requests are strict; responses documented)."""

from __future__ import annotations

from typing import Any

from marshmallow import ValidationError, fields, validate

from app.ledger.models import JOB_STATUSES, JOB_TYPES
from app.ledger.replay import CLUSTER_DIMENSIONS, REPLAYABLE
from schemas.base import Loose, Strict

JOB_ID_PATTERN = r"^[1-9][0-9]{0,18}$"
RATE = validate.Range(min=1, max=200)


def _reason(value: str) -> None:
    if not value.strip():
        raise ValidationError("reason must not be blank")
    if "\x00" in value:
        raise ValidationError("reason must not contain NUL")


class CommaList(fields.String):
    """A comma-separated list of allowed values in one query parameter (``status=failed,dead``)."""

    def __init__(self, choices: list[str] | tuple[str, ...], **kw: Any) -> None:
        self.choices = tuple(choices)
        kw.setdefault("metadata", {})["description"] = "comma-separated: " + ", ".join(self.choices)
        super().__init__(validate=validate.Length(min=1, max=512), **kw)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kw: Any) -> tuple[str, ...]:  # type: ignore[override]  # the string parsed into its items
        raw = super()._deserialize(value, attr, data, **kw)
        items = [v.strip() for v in raw.split(",") if v.strip()]
        bad = [v for v in items if v not in self.choices]
        if bad or not items:
            raise ValidationError(f"allowed values: {', '.join(self.choices)}")
        return tuple(dict.fromkeys(items))


Reason = fields.String(validate=[validate.Length(min=1, max=1024), _reason], metadata={"description": "why"})


def _no_nul(value: str) -> None:
    if "\x00" in value:  # PostgreSQL text cannot hold NUL: a 400, not a 500 from the driver
        raise ValidationError("must not contain NUL")


Text256 = fields.String(validate=[validate.Length(min=1, max=256), _no_nul])
AgeSeconds = fields.Integer(validate=validate.Range(min=0, max=10 * 365 * 86400))


# --------------------------------------------------------------------------- queries
class JobListQuery(Strict):
    type = CommaList(JOB_TYPES)
    status = CommaList(JOB_STATUSES)
    instance_id = Text256
    trace_id = Text256
    keyword = Text256
    created_from = fields.AwareDateTime()
    created_to = fields.AwareDateTime()
    min_age_seconds = AgeSeconds
    max_age_seconds = AgeSeconds
    limit = fields.Integer(load_default=20, validate=validate.Range(min=1, max=100))
    cursor = fields.String(validate=validate.Length(min=1, max=1024))


class ClusterQuery(Strict):
    group_by = CommaList(CLUSTER_DIMENSIONS)
    type = CommaList(JOB_TYPES)
    status = CommaList(REPLAYABLE)
    instance_id = Text256
    trace_id = Text256
    limit = fields.Integer(load_default=20, validate=validate.Range(min=1, max=100))


# --------------------------------------------------------------------------- bodies
class RetryBody(Strict):
    reason = Reason
    payload = fields.Raw(
        allow_none=False, metadata={"description": "new input; a changed one gets a new operation_key"}
    )


class SkipBody(Strict):
    reason = Reason


JobIds = fields.List(
    fields.String(validate=validate.Regexp(JOB_ID_PATTERN)),
    required=True,
    validate=validate.Length(min=1, max=500),
)


class BatchRetryBody(Strict):
    job_ids = JobIds
    rate = fields.Integer(
        strict=True, load_default=20, validate=RATE, metadata={"description": "jobs per second"}
    )
    reason = Reason


class BatchSkipBody(Strict):
    job_ids = JobIds
    reason = Reason


class ReplayConditions(Strict):
    statuses = fields.List(
        fields.String(validate=validate.OneOf(REPLAYABLE)), validate=validate.Length(min=1, max=2)
    )
    types = fields.List(
        fields.String(validate=validate.OneOf(JOB_TYPES)), validate=validate.Length(min=1, max=11)
    )
    instance_id = Text256
    trace_id = Text256
    error_keyword = Text256
    error_pattern = fields.String(validate=validate.Length(max=300))
    min_age_seconds = AgeSeconds
    max_age_seconds = AgeSeconds


class ReplayPreviewBody(ReplayConditions):
    sample_size = fields.Integer(strict=True, load_default=20, validate=validate.Range(min=1, max=100))


class ReplayBody(ReplayConditions):
    limit = fields.Integer(strict=True, load_default=500, validate=validate.Range(min=1, max=500))
    rate = fields.Integer(strict=True, load_default=20, validate=RATE)
    reason = Reason


# --------------------------------------------------------------------------- responses
class JobSchema(Loose):
    id = fields.String(required=True)
    type = fields.String(required=True)
    queue = fields.String(required=True)
    status = fields.String(required=True)
    instance_id = fields.String(allow_none=True)
    task_id = fields.String(allow_none=True)
    step_key = fields.String(allow_none=True)
    priority = fields.Integer()
    run_at = fields.DateTime()
    attempts = fields.Integer()
    max_attempts = fields.Integer()
    generation = fields.Integer()
    lease_until = fields.DateTime(allow_none=True)
    execution_deadline = fields.DateTime(allow_none=True)
    execution_timeout_ms = fields.Integer()
    remaining_ms = fields.Integer(allow_none=True)
    last_error = fields.String(allow_none=True)
    error_code = fields.String(allow_none=True)
    operation_key = fields.String()
    idempotency_key = fields.String(allow_none=True)
    trace_id = fields.String()
    created_at = fields.DateTime()
    updated_at = fields.DateTime()
    finished_at = fields.DateTime(allow_none=True)
    has_effect_marker = fields.Boolean()


class AttemptSchema(Loose):
    id = fields.String(required=True)
    generation = fields.Integer()
    attempt = fields.Integer()
    status = fields.String()
    worker_id = fields.String(allow_none=True)
    request = fields.Raw(allow_none=True)
    response = fields.Raw(allow_none=True)
    error = fields.String(allow_none=True)
    error_code = fields.String(allow_none=True)
    due_at = fields.DateTime()
    started_at = fields.DateTime()
    finished_at = fields.DateTime(allow_none=True)
    duration_ms = fields.Integer(allow_none=True)


class ReceiptSchema(Loose):
    id = fields.String()
    operation_key = fields.String()
    step_key = fields.String()
    job_id = fields.String(allow_none=True)
    generation = fields.Integer(allow_none=True)
    result = fields.Raw(allow_none=True)
    created_at = fields.DateTime()


class JobDetailSchema(JobSchema):
    payload = fields.Raw()
    result = fields.Raw(allow_none=True)
    effect_marker = fields.Raw(allow_none=True, metadata={"description": "side-effect marker (L-EFFECT-4)"})
    attempts_history = fields.List(fields.Nested(AttemptSchema))
    receipts = fields.List(fields.Nested(ReceiptSchema))


class JobPageSchema(Loose):
    items = fields.List(fields.Nested(JobSchema), required=True)
    next_cursor = fields.String()


class DiagnosticBundleSchema(Loose):
    format = fields.String(required=True)
    exported_at = fields.DateTime(required=True)
    request_id = fields.String(allow_none=True)
    trace_id = fields.String(required=True)
    status_counts = fields.Dict(keys=fields.String(), values=fields.Integer())
    jobs = fields.List(fields.Nested(JobDetailSchema), required=True)
    instance_ids = fields.List(fields.String())
    instances = fields.List(fields.Dict())
    truncated = fields.Boolean()
    runtime_status = fields.Dict(required=True, allow_none=True)  # null for a namespace-scoped operator
