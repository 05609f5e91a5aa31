"""Pure matching of events (no I/O): event-type filters with wildcards, and the simple field
conditions of automation rules, each bounded before it is evaluated."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from app.engine.events import EVENT_TYPES
from app.errors import FieldError, InvalidArgument

FAMILIES = frozenset(t.split(".")[0] for t in EVENT_TYPES)
MAX_PATTERNS = 32
MAX_CONDITIONS = 16
MAX_PATH_DEPTH = 8
MAX_VALUE_CHARS = 1024
OPERATORS = ("eq", "ne", "in", "exists")


def pattern_problem(pattern: Any) -> str | None:
    """Why ``pattern`` is not a valid event-type filter (None: valid). ``*``, ``<family>.*`` or a type."""
    if not isinstance(pattern, str):
        return "must be a string"
    if pattern == "*" or pattern in EVENT_TYPES:
        return None
    if pattern.endswith(".*") and pattern[:-2] in FAMILIES:
        return None
    return f"unknown event type {pattern[:80]!r} (a type, <family>.* with family one of {sorted(FAMILIES)}, or *)"


def validate_patterns(patterns: Any, field: str = "event_types") -> list[str]:
    if not isinstance(patterns, list) or not 1 <= len(patterns) <= MAX_PATTERNS:
        raise InvalidArgument(f"{field} must be a list of 1-{MAX_PATTERNS} event types", field=field)
    errs = [FieldError(f"{field}[{i}]", why) for i, p in enumerate(patterns) if (why := pattern_problem(p))]
    if errs:
        raise InvalidArgument(errors=errs)
    return list(dict.fromkeys(patterns))


def type_matches(patterns: Iterable[str], event_type: str) -> bool:
    for p in patterns:
        if p == "*" or p == event_type or (p.endswith(".*") and event_type.startswith(p[:-1])):
            return True
    return False


# ------------------------------------------------------------------ rule conditions
def validate_conditions(conditions: Any, field: str = "conditions") -> list[dict]:
    """``[{"path": "instance.state", "op": "eq", "value": "SUCCEEDED"}, ...]`` (all must hold)."""
    if not isinstance(conditions, list) or len(conditions) > MAX_CONDITIONS:
        raise InvalidArgument(f"{field} must be a list of at most {MAX_CONDITIONS} conditions", field=field)
    errs: list[FieldError] = []
    for i, c in enumerate(conditions):
        where = f"{field}[{i}]"
        if not isinstance(c, dict) or set(c) - {"path", "op", "value"}:
            errs.append(FieldError(where, "must be an object with path, op and value"))
            continue
        path = c.get("path")
        if not isinstance(path, str) or not path or len(path.split(".")) > MAX_PATH_DEPTH or len(path) > 256:
            errs.append(
                FieldError(f"{where}.path", f"must be a dotted path of at most {MAX_PATH_DEPTH} names")
            )
        if c.get("op") not in OPERATORS:
            errs.append(FieldError(f"{where}.op", f"must be one of {', '.join(OPERATORS)}"))
        value = c.get("value")
        if c.get("op") == "in" and not (isinstance(value, list) and len(value) <= 64):
            errs.append(FieldError(f"{where}.value", "must be a list of at most 64 values for op in"))
        if len(repr(value)) > MAX_VALUE_CHARS:
            errs.append(FieldError(f"{where}.value", f"must be at most {MAX_VALUE_CHARS} characters"))
    if errs:
        raise InvalidArgument(errors=errs)
    return conditions


ABSENT = object()  # a path that names nothing


def lookup(doc: Any, path: str) -> Any:
    for name in path.split(".")[:MAX_PATH_DEPTH]:
        if not isinstance(doc, dict) or name not in doc:
            return ABSENT
        doc = doc[name]
    return doc


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float | Decimal) and isinstance(b, int | float | Decimal):
        return Decimal(str(a)) == Decimal(str(b))
    return a == b


def conditions_hold(conditions: list[dict], event: dict) -> bool:
    """Every condition holds on ``event`` (``{"type", "body", ...}``; paths start at the body)."""
    for c in conditions:
        found = lookup(event, c["path"])
        op = c["op"]
        value: Any = c.get("value")
        if op == "exists":
            ok = (found is not ABSENT) == (value is not False)
        elif found is ABSENT:
            ok = op == "ne"
        elif op == "eq":
            ok = _same(found, value)
        elif op == "ne":
            ok = not _same(found, value)
        else:
            ok = any(_same(found, v) for v in value)
        if not ok:
            return False
    return True
