"""Field rules shared by control, signals and recovery (W-CTL-1, W-SIG-1, X-RECOVER)."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from app import jsonx
from app.errors import FieldError

MAX_REASON = 1024
MAX_EVIDENCE_REF = 512
MAX_PAYLOAD_BYTES = 256 * 1024
UINT64_MAX = 2**64 - 1
UINT32_MAX = 2**32 - 1
_REVISION_RE = re.compile(r"^[1-9][0-9]{0,19}$")


def encodable(s: str) -> bool:
    """A string PostgreSQL can store: valid UTF-8 (no lone surrogates) and no NUL."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in s


def reason(errors: list[FieldError], body: dict, name: str = "reason") -> str:
    v = body.get(name)
    if name not in body:
        errors.append(FieldError(name, "required: 1-1024 Unicode characters"))
    elif not isinstance(v, str) or not 1 <= len(v) <= MAX_REASON:
        errors.append(FieldError(name, "1-1024 Unicode characters"))
    elif not encodable(v):
        errors.append(FieldError(name, "must be valid Unicode without NUL"))
    elif v.strip() == "" or all(c.isspace() or unicodedata.category(c) in ("Zs", "Cf") for c in v):
        errors.append(FieldError(name, "must not be all whitespace"))
    else:
        return v
    return ""


def evidence_ref(errors: list[FieldError], body: dict) -> str | None:
    if "evidence_ref" not in body or body["evidence_ref"] is None:
        return None
    v = body["evidence_ref"]
    if not isinstance(v, str) or not 1 <= len(v) <= MAX_EVIDENCE_REF:
        errors.append(FieldError("evidence_ref", "1-512 Unicode characters"))
    elif not encodable(v) or any(
        c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp", "Zs") for c in v
    ):
        errors.append(FieldError("evidence_ref", "no whitespace or control characters"))
    else:
        return v
    return None


def revision(errors: list[FieldError], body: dict, name: str) -> int:
    v = body.get(name)
    if name not in body:
        errors.append(
            FieldError(name, "required: the non-zero control_revision read before (decimal string)")
        )
    elif not isinstance(v, str) or not _REVISION_RE.match(v) or int(v) > UINT64_MAX:
        errors.append(FieldError(name, 'a non-zero uint64 as a decimal string, e.g. "1"'))
    else:
        return int(v)
    return 0


def json_value(errors: list[FieldError], body: dict, name: str, *, required: bool = True) -> Any:
    """A JSON document of at most 256 KiB that PostgreSQL can store (no NUL, valid Unicode)."""
    if name not in body:
        if required:
            errors.append(FieldError(name, "required (explicit null is a value; a missing field is not)"))
        return None
    raw = jsonx.dumps(body[name])
    if "\\u0000" in raw or not encodable(raw):
        errors.append(FieldError(name, "NUL characters and lone surrogates cannot be stored"))
    elif len(raw.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        errors.append(FieldError(name, f"at most {MAX_PAYLOAD_BYTES} bytes of JSON"))
    return body[name]


def unknown(body: dict, allowed: set[str]) -> list[FieldError]:
    return [FieldError(k, "unknown field") for k in body if k not in allowed]
