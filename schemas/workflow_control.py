"""marshmallow schemas of control (W-CTL-1), signals (W-SIG-1) and the history page query. The loaded
values are exactly what ``app.engine.control.control`` and ``app.engine.signals.send`` take."""

from __future__ import annotations

from typing import Any

from marshmallow import fields

from app.engine.control import OPERATIONS
from app.engine.documents import KEY_RE, NAME_RE, PAYLOAD_VERSION_RE
from app.engine.signals import MAX_CORRELATION_BYTES
from schemas.base import (
    DecimalString,
    Loose,
    Strict,
    encodable,
    envelope,
    evidence_ref,
    integer,
    json_value,
    page,
    reason,
    text,
)
from schemas.workflows import KEY, InstanceResult, limit

UINT32_MAX = 2**32 - 1


class ControlRequest(Strict):
    operation = text(
        "one of PAUSE, RESUME, CANCEL",
        lambda v: None if v in OPERATIONS else "one of PAUSE, RESUME, CANCEL",
        missing="required: PAUSE, RESUME or CANCEL",
        metadata={"enum": list(OPERATIONS)},
    )
    expected_control_revision = DecimalString(
        required=True,
        error_messages={
            "required": "required: the non-zero control_revision read before (decimal string)",
            "invalid": 'a non-zero uint64 as a decimal string, e.g. "1"',
            "null": 'a non-zero uint64 as a decimal string, e.g. "1"',
        },
        metadata={"pattern": r"^[1-9][0-9]{0,19}$", "description": "the control_revision read before"},
    )
    reason = reason()


def _name(rx: Any, rule: str, pattern: str) -> fields.String:
    return text(
        rule,
        lambda v: None if rx.fullmatch(v) else rule,
        missing=f"required: {rule}",
        metadata={"pattern": pattern},
    )


def _correlation(v: str) -> str | None:
    ok = encodable(v) and 1 <= len(v.encode("utf-8")) <= MAX_CORRELATION_BYTES
    return None if ok else "1-512 bytes of UTF-8, no NUL"


class SignalRequest(Strict):
    name = _name(NAME_RE, "1-128 ASCII name characters", r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
    payload_version = _name(
        PAYLOAD_VERSION_RE, "1-32 ASCII name characters", r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$"
    )
    target_step_key = _name(KEY_RE, "1-64 ASCII name characters", KEY)
    target_activation_sequence = integer(
        1, UINT32_MAX, "a non-zero uint32 integer", missing="required: a non-zero uint32"
    )
    correlation_key = text(
        "1-512 bytes of UTF-8, no NUL",
        _correlation,
        missing="required: 1-512 bytes of UTF-8",
        metadata={"minLength": 1, "maxLength": MAX_CORRELATION_BYTES},
    )
    payload = json_value(metadata={"description": "checked against the step's payload contract"})
    reason = reason()
    evidence_ref = evidence_ref()


class PageQuery(Strict):
    limit = limit()
    cursor = fields.String()


# --------------------------------------------------------------------------- responses
class Signal(Loose):
    id = fields.String(required=True)
    namespace_id = fields.String(required=True)
    workflow_id = fields.String(required=True)
    revision = fields.String(required=True)
    name = fields.String(required=True)
    payload_version = fields.String(required=True)
    target_step_key = fields.String(required=True)
    target_activation_sequence = fields.Integer(required=True)
    correlation_key = fields.String(required=True)
    payload = fields.Raw(required=True, allow_none=True)
    actor_id = fields.String(required=True)
    state = fields.String(required=True)
    accepted_at = fields.DateTime(required=True)
    expires_at = fields.DateTime(required=True)
    evidence_ref = fields.String()
    disposition = fields.String()
    consumed_wait_id = fields.String()


class SignalResult(Loose):
    signal = fields.Nested(Signal, required=True)
    deduplicated = fields.Boolean(required=True)


SignalPage = page(Signal, "SignalPage")


ControlResponse = envelope(InstanceResult, "ControlResponse")
SignalResponse = envelope(Signal, "SignalResponse")
SignalResultResponse = envelope(SignalResult, "SignalResultResponse")
SignalPageResponse = envelope(SignalPage, "SignalPageResponse")
