"""Building blocks of every API's marshmallow schemas: strict request / loose response bases, the
``{request_id, data}`` envelope, and fields that check one rule each and answer with the rule's own
message (so a field never gets two messages, and the message says what is allowed). The rule's
constraints are also given as OpenAPI keywords (``metadata``) so ``/openapi.json`` types them."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from marshmallow import EXCLUDE, Schema, ValidationError, fields

from app import jsonx

Check = Callable[[Any], str | None]


class Strict(Schema):
    """Request schemas: unknown fields are refused (additionalProperties: false)."""


class Loose(Schema):
    """Response schemas: documentation of what the API returns (never used to load)."""

    class Meta:
        unknown = EXCLUDE


def envelope(data: Any, name: str) -> type[Schema]:
    """``{"request_id", "data"}`` around ``data`` (a Schema class or a field)."""
    field = fields.Nested(data, required=True) if isinstance(data, type) else data
    return Loose.from_dict({"request_id": fields.String(required=True), "data": field}, name=name)


def page(item: type[Schema], name: str) -> type[Schema]:
    """One page of a cursor-paginated list: ``{"items": [item], "next_cursor"?}``."""
    return Loose.from_dict(
        {"items": fields.List(fields.Nested(item), required=True), "next_cursor": fields.String()}, name=name
    )


ANY = fields.Dict(required=True)


def _validator(check: Check) -> Callable[[Any], None]:
    def run(value: Any) -> None:
        msg = check(value)
        if msg is not None:
            raise ValidationError(msg)

    return run


def _messages(invalid: str, missing: str | None) -> dict[str, str | list[Any] | dict[Any, Any]]:
    return {"invalid": invalid, "null": invalid, "required": missing or invalid}


def text(invalid: str, check: Check | None = None, *, missing: str | None = None, **kw: Any) -> fields.String:
    """A string; a non-string, ``null`` or a value ``check`` refuses is answered with ``invalid``
    (or ``check``'s own message); with ``missing`` it is required and its absence says so."""
    if check is not None:
        kw["validate"] = _validator(check)
    if missing is not None:
        kw["required"] = True
    return fields.String(error_messages=_messages(invalid, missing), **kw)


def integer(lo: int, hi: int, invalid: str, *, missing: str | None = None, **kw: Any) -> fields.Integer:
    """A JSON integer (never a boolean, a string or a fraction) from ``lo`` to ``hi``."""
    if missing is not None:
        kw["required"] = True
    return fields.Integer(
        strict=True,
        validate=_validator(lambda v: None if lo <= v <= hi else invalid),
        error_messages=_messages(invalid, missing),
        metadata={"minimum": lo, "maximum": hi, **kw.pop("metadata", {})},
        **kw,
    )


class IntegralNumber(fields.Integer):
    """A JSON integer, also written with a zero fraction (``60.0``); loads as ``int``."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kw: Any) -> int:
        if isinstance(value, Decimal) and value == value.to_integral_value():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.make_error("invalid")
        return value


class Boolean(fields.Boolean):
    """``true`` or ``false`` only (marshmallow's Boolean also takes ``1``, ``"yes"``...)."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kw: Any) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


class DecimalString(fields.String):
    """A non-zero uint64 written as a decimal string (``"1"``); loads as ``int``."""

    MAX = 2**64 - 1

    def _deserialize(self, value: Any, attr: Any, data: Any, **kw: Any) -> int:  # type: ignore[override]  # a decimal string loads as an int
        if (
            not isinstance(value, str)
            or not value.isascii()
            or not value.isdigit()
            or value.startswith("0")
            or len(value) > 20
            or int(value) > self.MAX
        ):
            raise self.make_error("invalid")
        return int(value)


def encodable(s: str) -> bool:
    """A string PostgreSQL can store: valid UTF-8 (no lone surrogates) and no NUL."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in s


def json_bytes(value: Any) -> tuple[int, bool]:
    """The size of ``value`` as exact JSON, and whether PostgreSQL can store it (no NUL, no lone
    surrogate)."""
    raw = jsonx.dumps(value)
    return len(raw.encode("utf-8", "surrogatepass")), "\\u0000" not in raw and encodable(raw)


MAX_DOCUMENT_BYTES = 256 * 1024
UNSTORABLE = "NUL characters and lone surrogates cannot be stored"
TOO_BIG = f"at most {MAX_DOCUMENT_BYTES} bytes of JSON"
REQUIRED_VALUE = "required (explicit null is a value; a missing field is not)"


def storable_document(value: Any) -> str | None:
    """At most 256 KiB of JSON that PostgreSQL can store."""
    size, storable = json_bytes(value)
    if not storable:
        return UNSTORABLE
    return TOO_BIG if size > MAX_DOCUMENT_BYTES else None


def json_value(
    check: Check = storable_document, *, missing: str | None = REQUIRED_VALUE, **kw: Any
) -> fields.Raw:
    """Any JSON value, ``null`` included, that ``check`` accepts; required unless ``missing`` is None."""
    msgs: dict[str, str | list[Any] | dict[Any, Any]] = {"required": missing} if missing else {}
    kw["metadata"] = {"description": "any JSON value", **kw.get("metadata", {})}
    return fields.Raw(
        allow_none=True, required=missing is not None, validate=_validator(check), error_messages=msgs, **kw
    )


# --------------------------------------------------------------------------- W-CTL / W-SIG / X-RECOVER
MAX_REASON = 1024
MAX_EVIDENCE_REF = 512


def _reason(v: str) -> str | None:
    if not 1 <= len(v) <= MAX_REASON:
        return "1-1024 Unicode characters"
    if not encodable(v):
        return "must be valid Unicode without NUL"
    if all(c.isspace() or unicodedata.category(c) in ("Zs", "Cf") for c in v):
        return "must not be all whitespace"
    return None


def _evidence_ref(v: str) -> str | None:
    if not 1 <= len(v) <= MAX_EVIDENCE_REF:
        return "1-512 Unicode characters"
    if not encodable(v) or any(
        c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp", "Zs") for c in v
    ):
        return "no whitespace or control characters"
    return None


def reason() -> fields.String:
    return text(
        "1-1024 Unicode characters",
        _reason,
        missing="required: 1-1024 Unicode characters",
        metadata={"minLength": 1, "maxLength": MAX_REASON, "description": "why (audited)"},
    )


def evidence_ref() -> fields.String:
    return text(
        "1-512 Unicode characters",
        _evidence_ref,
        load_default=None,
        allow_none=True,
        metadata={
            "minLength": 1,
            "maxLength": MAX_EVIDENCE_REF,
            "pattern": r"^\S+$",
            "description": "a reference to the evidence (ticket, document id)",
        },
    )
