"""marshmallow schemas of recovery (X-RECOVER), the operation audit (W-AUDIT) and step history
(X-HIST). ``RecoveryRequest`` loads exactly what ``app.engine.recovery.recover`` and
``app.engine.recovery.resolve_instance`` take."""

from __future__ import annotations

from typing import Any

from marshmallow import ValidationError, fields, post_load, validates_schema

from app.engine.documents import KEY_RE
from app.engine.recovery import ACTIONS, RESOLUTIONS
from app.engine.row_access import MISSING
from schemas.base import Loose, Strict, envelope, evidence_ref, json_value, page, reason, storable_document
from schemas.tasks import Task
from schemas.workflow_control import PageQuery
from schemas.workflows import HEX32, KEY, Instance, StepSummary, Wait

ACTION_RULE = "required: RETRY_STEP, SUCCEED_STEP, FAIL_STEP or RESOLVE_INSTANCE"
STEP_KEY_RULE = "required: a step key (1-64 ASCII name characters)"
RESOLUTION_RULE = "required with RESOLVE_INSTANCE: CONTINUE, CANCEL or FAIL"


class RecoveryRequest(Strict):
    """Which fields an action takes depends on the action, so the per-action rules are checked
    together (every problem reported at once); the fields only carry their types."""

    action = fields.Raw(
        required=True,
        metadata={"type": "string", "enum": list(ACTIONS)},
        error_messages={"required": ACTION_RULE},
    )
    step_key = fields.Raw(
        metadata={"type": "string", "pattern": KEY, "description": "not with RESOLVE_INSTANCE"}
    )
    resolution = fields.Raw(
        metadata={"type": "string", "enum": list(RESOLUTIONS), "description": "RESOLVE_INSTANCE only"}
    )
    output = json_value(storable_document, missing=None, metadata={"description": "SUCCEED_STEP only"})
    reason = reason()
    evidence_ref = evidence_ref()

    @validates_schema(skip_on_field_errors=False, pass_original=True)
    def _per_action(self, data: dict[str, Any], original: Any, **kw: Any) -> None:
        errors: dict[str, str] = {}
        action = original.get("action")
        if "action" in original and action not in ACTIONS:
            errors["action"] = ACTION_RULE
        if action == "RESOLVE_INSTANCE":
            if "step_key" in original:
                errors["step_key"] = "RESOLVE_INSTANCE resolves the instance: no step_key"
            if original.get("resolution") not in RESOLUTIONS:
                errors["resolution"] = RESOLUTION_RULE
        else:
            key = original.get("step_key")
            if not isinstance(key, str) or not KEY_RE.fullmatch(key):
                errors["step_key"] = STEP_KEY_RULE
            if "resolution" in original:
                errors["resolution"] = "only RESOLVE_INSTANCE takes a resolution"
        if action == "SUCCEED_STEP":
            if "output" not in original:
                errors["output"] = "required (explicit null is a value; a missing field is not)"
        elif "output" in original:
            errors["output"] = "only SUCCEED_STEP takes an output"
        if errors:
            raise ValidationError({k: [v] for k, v in errors.items()})

    @post_load
    def _request(self, data: dict[str, Any], **kw: Any) -> dict[str, Any]:
        resolve = data["action"] == "RESOLVE_INSTANCE"
        return {
            "action": data["action"],
            "step_key": None if resolve else data["step_key"],
            "resolution": data["resolution"] if resolve else None,
            "output": data.get("output", MISSING) if data["action"] == "SUCCEED_STEP" else MISSING,
            "reason": data["reason"],
            "evidence_ref": data["evidence_ref"],
        }


class SignalAuditQuery(PageQuery):
    signal_id = fields.String(
        validate=lambda v: len(v) == 32 and all(c in "0123456789abcdef" for c in v),
        error_messages={"validator_failed": "a 32-character lowercase hex signal id"},
        metadata={"pattern": HEX32},
    )


# --------------------------------------------------------------------------- responses
class Operation(Loose):
    id = fields.String(required=True)
    workflow_id = fields.String(required=True)
    operation_id = fields.String(required=True)
    actor_id = fields.String(required=True)
    action = fields.String(required=True)
    created_at = fields.DateTime(required=True)
    signal_id = fields.String(metadata={"description": "signal-resource audit only"})


class OperationDetail(Operation):
    reason = fields.String()
    evidence_ref = fields.String()
    before = fields.Raw(allow_none=True, metadata={"type": ["object", "null"]})
    after = fields.Raw(allow_none=True, metadata={"type": ["object", "null"]})


OperationPage = page(Operation, "OperationPage")


class RecoveryResult(Loose):
    instance = fields.Nested(Instance, required=True)
    step = fields.Nested(StepSummary, metadata={"description": "step actions"})
    resolution = fields.Dict(metadata={"description": "RESOLVE_INSTANCE: what was done"})
    operation_id = fields.String(required=True)
    deduplicated = fields.Boolean(required=True)


class Activation(Loose):
    id = fields.String(required=True)
    sequence = fields.Integer(required=True)
    state = fields.String(required=True)
    task_attempts = fields.Integer(required=True)
    activated_at = fields.DateTime(required=True)
    input = fields.Raw(allow_none=True)
    output = fields.Raw(allow_none=True)
    error = fields.Raw(allow_none=True)
    completed_at = fields.DateTime()
    child_workflow_id = fields.String()
    wait = fields.Nested(Wait)


ActivationPage = page(Activation, "ActivationPage")


class Round(Task):
    activation_id = fields.String(required=True)
    activation_sequence = fields.Integer(required=True)
    worker = fields.Dict(
        metadata={"description": "the identity (host, pid, sdk) of the worker of its latest claim"}
    )
    failure = fields.Dict(
        metadata={
            "description": "the failure its worker reported: type, message, stack (at most 16 KiB), worker"
        }
    )


RoundPage = page(Round, "RoundPage")


OperationResponse = envelope(OperationDetail, "AuditOperationResponse")
OperationPageResponse = envelope(OperationPage, "OperationPageResponse")
RecoveryResponse = envelope(RecoveryResult, "RecoveryResponse")
ActivationPageResponse = envelope(ActivationPage, "ActivationPageResponse")
RoundPageResponse = envelope(RoundPage, "RoundPageResponse")


class WorkflowEvent(Loose):
    id = fields.String(required=True, metadata={"pattern": HEX32})
    seq = fields.Integer(required=True, metadata={"description": "per-instance sequence number, from 1"})
    type = fields.String(
        required=True, metadata={"description": "workflow.*, step.*, task.*, signal.* (docs/integrations.md)"}
    )
    workflow_id = fields.String(required=True)
    created_at = fields.String(required=True)
    body = fields.Dict(
        required=True,
        metadata={"description": "instance summary, trace_id, step_key, activation / task / signal id"},
    )


class WorkflowEventPage(Loose):
    items = fields.List(fields.Nested(WorkflowEvent), required=True)
    next_cursor = fields.String()


WorkflowEventPageResponse = envelope(WorkflowEventPage, "WorkflowEventPageResponse")
