"""Exact JSON: numbers never pass through float (SPEC W-START-2), duplicate keys are refused.

``loads`` keeps integers as ``int`` (arbitrary precision) and fractions as ``Decimal``; ``dumps``
writes them back digit for digit, so ``9007199254740993`` and ``0.1000`` round-trip exactly.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

# Limits of the strict parser (documented in docs/operations.md, "Request limits"). Every number is
# range-checked on its literal *before* any conversion that could take time (``1e999999999`` would pin
# a CPU in ``Decimal.to_integral_value`` or ``int()``, and fail in PostgreSQL's numeric).
MAX_DEPTH = 64  # nested objects / arrays, the body itself is depth 1
MAX_INT_DIGITS = 4300  # the interpreter's default safe digit limit (sys.get_int_max_str_digits)
MAX_EXPONENT = 4300  # |adjusted decimal exponent| of a fraction or exponent literal
_EXP = re.compile(r"[eE]([+-]?)(\d+)$")
_SURROGATE = re.compile("[\ud800-\udfff]")


class DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"duplicate field {key!r}")


class BadJSON(ValueError):
    """Refused JSON; ``field`` names where (a dotted path such as ``input.items[0]``, or ``body``)."""

    def __init__(self, message: str, field: str = "body") -> None:
        self.field = field
        super().__init__(message)


class _BadNumber:
    """A number literal refused by the range check; reported with its path once parsing ends."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(k)
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not valid JSON")


def _int(literal: str) -> int | _BadNumber:
    digits = len(literal) - (literal[0] == "-")
    if digits > MAX_INT_DIGITS:
        return _BadNumber(f"integer has {digits} digits; at most {MAX_INT_DIGITS} are accepted")
    return int(literal)


def _fraction(literal: str) -> Decimal | _BadNumber:
    m = _EXP.search(literal)
    if m is not None and len(m.group(2).lstrip("0")) > 6:
        return _BadNumber(f"number exponent out of range (at most {MAX_EXPONENT} in magnitude)")
    mantissa = literal[: m.start()] if m is not None else literal
    if sum(c.isdigit() for c in mantissa) > MAX_INT_DIGITS:
        return _BadNumber(f"number has more than {MAX_INT_DIGITS} digits")
    value = Decimal(literal)
    if abs(value.adjusted()) > MAX_EXPONENT:
        return _BadNumber(f"number out of range (decimal exponent at most {MAX_EXPONENT} in magnitude)")
    return value


def _where(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path or 'body'}[{key}]"
    return f"{path}.{key}" if path else key


def _check_tree(root: Any) -> None:
    """One pass over the parsed value: refused numbers, lone surrogates and depth, each with its path."""
    stack: list[tuple[Any, str, int]] = [(root, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, _BadNumber):
            raise BadJSON(value.reason, path or "body")
        if isinstance(value, str):
            if _SURROGATE.search(value):
                raise BadJSON("string contains a lone UTF-16 surrogate", path or "body")
        elif isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise BadJSON(f"JSON nested deeper than {MAX_DEPTH} levels", path or "body")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                if isinstance(k, str) and _SURROGATE.search(k):
                    raise BadJSON("field name contains a lone UTF-16 surrogate", path or "body")
                stack.append((v, _where(path, k), depth + 1))


# The decoders, made once: ``json.loads`` with any option makes a decoder (and its C scanner) per call.
# One is shared by every thread, as ``json.loads`` shares its own default decoder: a parse keeps its state
# in the call, and the scanner's key cache is only a cache.
_STRICT = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_float=_fraction, parse_int=_int, parse_constant=_no_constant
)
_EXACT = json.JSONDecoder(parse_float=Decimal)


def _decode(decoder: json.JSONDecoder, text: str) -> Any:
    """``json.loads(text, <decoder's options>)``, without making the decoder again."""
    if text.startswith("\ufeff"):  # as json.loads refuses it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return decoder.decode(text)


def loads(text: str | bytes) -> Any:
    """Strict parse: duplicate keys raise DuplicateKey; NaN/Infinity, bad UTF-8, too-deep nesting,
    lone surrogates and out-of-range numbers raise BadJSON (naming the field); fractions become
    Decimal."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        value = _decode(_STRICT, text)
    except (DuplicateKey, BadJSON):
        raise
    except UnicodeDecodeError:
        raise BadJSON("body is not valid UTF-8") from None
    except RecursionError:
        raise BadJSON(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise BadJSON(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    _check_tree(value)
    return value


def rfc3339(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z")


# what ``json.dumps(s, ensure_ascii=False)`` writes for a string, without building an encoder per call
_quote = json.encoder.encode_basestring


def _key(k: Any) -> str:
    """A field name as the standard library's encoder writes it (``true``, ``null``, a float's repr), any
    other key by ``str``."""
    if isinstance(k, str):
        return k
    if k is True or k is False or k is None:
        return "true" if k else ("false" if k is False else "null")
    if isinstance(k, float):
        return float.__repr__(k)
    return str(k)


def _enc(o: Any, out: list[str]) -> None:
    if o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif isinstance(o, str):
        out.append(_quote(o))
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
            out.append(_quote(_key(k)))
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


class _Exact(Exception):
    """A Decimal: the standard library's encoder cannot write it digit for digit."""


def _default(o: Any) -> Any:
    """What ``_enc`` writes for the values the standard library's encoder does not know (its ``default``)."""
    if isinstance(o, datetime):
        return rfc3339(o)
    if isinstance(o, date):
        return o.isoformat()
    if isinstance(o, UUID):
        return str(o)
    if isinstance(o, Mapping):
        return dict(o)
    raise _Exact  # a Decimal, or a value ``_enc`` refuses with its own message


# The standard library's C encoder, set to write what ``_enc`` writes: compact, not ASCII-escaped, ints in
# full, floats by repr, NaN / Infinity refused, no check of circular references (``_enc`` has none either).
_fast = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False, default=_default
)


def dumps(obj: Any) -> str:
    """Compact JSON with exact numbers (int, Decimal) and RFC 3339 UTC times.

    The standard library's C encoder writes it (about ten times faster than ``_enc``, in Python); a value
    with a Decimal (a fraction read exactly), a key that is no string, or a value it refuses is written by
    ``_enc`` instead, which writes the same text for everything the C encoder takes (tested)."""
    try:
        return _fast.encode(obj)
    except (_Exact, TypeError, ValueError):
        return _dumps_exact(obj)


def _dumps_exact(obj: Any) -> str:
    """``dumps`` by ``_enc`` alone (and what the tests compare the C encoder's text with)."""
    out: list[str] = []
    _enc(obj, out)
    return "".join(out)


def loads_exact_db(text: str | None) -> Any:
    """Parse JSON text read from the database (``jsonb::text``) keeping numbers exact."""
    if text is None:
        return None
    return _decode(_EXACT, text)
