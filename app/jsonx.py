"""Exact JSON: numbers never pass through float (SPEC W-START-2), duplicate keys are refused.

``loads`` keeps integers as ``int`` (arbitrary precision) and fractions as ``Decimal``; ``dumps``
writes them back digit for digit, so ``9007199254740993`` and ``0.1000`` round-trip exactly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID


class DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"duplicate field {key!r}")


class BadJSON(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(k)
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not valid JSON")


def loads(text: str | bytes) -> Any:
    """Strict parse: duplicate keys raise DuplicateKey; NaN/Infinity, bad UTF-8 and too-deep
    nesting raise BadJSON; fractions become Decimal."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(
            text, object_pairs_hook=_pairs, parse_float=Decimal, parse_int=int, parse_constant=_no_constant
        )
    except DuplicateKey:
        raise
    except UnicodeDecodeError:
        raise BadJSON("body is not valid UTF-8") from None
    except RecursionError:
        raise BadJSON("JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise BadJSON(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def rfc3339(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _enc(o: Any, out: list[str]) -> None:
    if o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif isinstance(o, str):
        out.append(json.dumps(o, ensure_ascii=False))
    elif isinstance(o, int):
        out.append(int.__repr__(o))
    elif isinstance(o, Decimal):
        if not o.is_finite():
            raise ValueError("non-finite number")
        out.append(str(o))
    elif isinstance(o, float):
        if not math.isfinite(o):
            raise ValueError("non-finite number")
        out.append(float.__repr__(o))
    elif isinstance(o, Mapping):
        out.append("{")
        first = True
        for k, v in o.items():
            if not first:
                out.append(",")
            first = False
            out.append(json.dumps(str(k), ensure_ascii=False))
            out.append(":")
            _enc(v, out)
        out.append("}")
    elif isinstance(o, list | tuple):
        out.append("[")
        for i, v in enumerate(o):
            if i:
                out.append(",")
            _enc(v, out)
        out.append("]")
    elif isinstance(o, datetime):
        out.append('"' + rfc3339(o) + '"')
    elif isinstance(o, date):
        out.append('"' + o.isoformat() + '"')
    elif isinstance(o, UUID):
        out.append('"' + str(o) + '"')
    else:
        raise TypeError(f"not JSON serializable: {type(o).__name__}")


def dumps(obj: Any) -> str:
    """Compact JSON with exact numbers (int, Decimal) and RFC 3339 UTC times."""
    out: list[str] = []
    _enc(obj, out)
    return "".join(out)


def loads_exact_db(text: str | None) -> Any:
    """Parse JSON text read from the database (``jsonb::text``) keeping numbers exact."""
    if text is None:
        return None
    return json.loads(text, parse_float=Decimal)
