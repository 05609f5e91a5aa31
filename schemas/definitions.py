"""marshmallow schemas of workflow definitions and versions (X-DEF). The version document's top level
is typed here; its step graph (kinds, references, cycles) is checked by
``app.engine.documents.validate_document``, which reports every problem with its path at once."""

from __future__ import annotations

from typing import Any

from marshmallow import ValidationError, fields

from app.engine.definitions import NAME_RE
from app.engine.documents import MAX_DEADLINE_SECONDS, MAX_STEPS, VERSION_RE
from schemas.base import IntegralNumber, Loose, Strict, envelope, page, text
from schemas.workflows import VERSION, limit

NAME_RULE = "required: 1-128 characters (letters, digits, space _ . : -)"
VERSION_RULE = "required: 1-64 ASCII characters, first a letter or digit, then also _ . -"


def _name(v: str) -> str | None:
    return None if NAME_RE.fullmatch(v) and v == v.strip() else NAME_RULE


def _description(v: str) -> str | None:
    return None if len(v) <= 2000 and "\x00" not in v else "must be a string of at most 2000 characters"


class CreateDefinitionRequest(Strict):
    name = text(
        NAME_RULE, _name, missing=NAME_RULE, metadata={"pattern": r"^[A-Za-z0-9][A-Za-z0-9 _.:-]{0,127}$"}
    )
    description = text(
        "must be a string of at most 2000 characters",
        _description,
        allow_none=True,
        load_default=None,
        metadata={"maxLength": 2000},
    )


def _version(v: str) -> str | None:
    if not VERSION_RE.fullmatch(v):
        return VERSION_RULE
    return '"latest" is reserved and never resolved' if v.lower() == "latest" else None


class JsonSchemaField(fields.Raw):
    """A JSON Schema (an object or a boolean); its content is checked by the engine."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kw: Any) -> Any:
        if not isinstance(value, dict | bool):
            raise ValidationError("must be a JSON Schema (an object or a boolean)")
        return value


def _steps(v: list) -> None:
    if not v:
        raise ValidationError("required: a non-empty array")
    if len(v) > MAX_STEPS:
        raise ValidationError(f"at most {MAX_STEPS} steps (got {len(v)})")


class VersionDocument(Strict):
    version = text(VERSION_RULE, _version, missing=VERSION_RULE, metadata={"pattern": VERSION})
    description = text("must be a string")
    input_schema = JsonSchemaField(required=True, metadata={"type": ["object", "boolean"]})
    deadline_seconds = IntegralNumber(
        required=True,
        validate=lambda v: 1 <= v <= MAX_DEADLINE_SECONDS,
        error_messages={
            "invalid": f"must be an integer from 1 to {MAX_DEADLINE_SECONDS}",
            "null": f"must be an integer from 1 to {MAX_DEADLINE_SECONDS}",
            "validator_failed": f"must be an integer from 1 to {MAX_DEADLINE_SECONDS}",
        },
        metadata={"minimum": 1, "maximum": MAX_DEADLINE_SECONDS},
    )
    signals = fields.List(
        fields.Dict(error_messages={"invalid": "must be an object"}),
        error_messages={"invalid": "must be an array", "null": "must be an array"},
        metadata={"description": "signal contracts: {name, payload_version, schema}"},
    )
    steps = fields.List(
        fields.Dict(error_messages={"invalid": "must be an object"}),
        required=True,
        validate=_steps,
        error_messages={m: "required: a non-empty array" for m in ("invalid", "null", "required")},
        metadata={
            "minItems": 1,
            "maxItems": MAX_STEPS,
            "description": "steps: {key, kind (TASK, SIGNAL, TIMER, POLL, SUBWORKFLOW, TRIGGER), after, ...}",
        },
    )
    output = fields.Raw(
        allow_none=True, metadata={"description": "an output mapping ($.steps.<key>.output ...)"}
    )


# --------------------------------------------------------------------------- responses
class VersionRef(Loose):
    id = fields.String(required=True)
    version = fields.String(required=True)
    queues = fields.List(fields.String(), required=True)
    created_at = fields.DateTime(required=True)


class Definition(Loose):
    id = fields.String(required=True)
    namespace_id = fields.String(required=True)
    name = fields.String(required=True)
    description = fields.String()
    versions = fields.List(fields.Nested(VersionRef), required=True)
    created_at = fields.DateTime(required=True)
    updated_at = fields.DateTime(required=True)


class Version(Loose):
    id = fields.String(required=True)
    definition_id = fields.String(required=True)
    version = fields.String(required=True)
    queues = fields.List(fields.String(), required=True)
    document = fields.Dict(required=True, metadata={"description": "the published version document"})
    created_at = fields.DateTime(required=True)


class SignalContract(Loose):
    name = fields.String(required=True)
    payload_version = fields.String(required=True)
    schema = fields.Raw(required=True, metadata={"type": ["object", "boolean"]})


class Contract(Loose):
    definition_id = fields.String(required=True)
    definition_version_id = fields.String(required=True)
    version = fields.String(required=True)
    input_schema = fields.Raw(required=True, metadata={"type": ["object", "boolean"]})
    signals = fields.List(fields.Nested(SignalContract), required=True)


class DefinitionResult(Loose):
    definition = fields.Nested(Definition, required=True)
    deduplicated = fields.Boolean(required=True)


class VersionResult(Loose):
    version = fields.Nested(Version, required=True)
    deduplicated = fields.Boolean(required=True)


class DefinitionListQuery(Strict):
    name = fields.String(metadata={"description": "exact definition name"})
    limit = limit()
    cursor = fields.String()


class VersionListQuery(Strict):
    limit = limit()
    cursor = fields.String()


DefinitionPageResponse = envelope(page(Definition, "DefinitionPage"), "DefinitionPageResponse")
VersionPageResponse = envelope(page(Version, "VersionPage"), "VersionPageResponse")
DefinitionResponse = envelope(Definition, "DefinitionResponse")
DefinitionResultResponse = envelope(DefinitionResult, "DefinitionResultResponse")
VersionResponse = envelope(Version, "VersionResponse")
VersionResultResponse = envelope(VersionResult, "VersionResultResponse")
ContractResponse = envelope(Contract, "ContractResponse")
