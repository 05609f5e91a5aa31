"""Input / output mappings (X-DEF): every string ``$.input…``, ``$.business_key`` or
``$.steps.KEY.output…`` inside a mapping is replaced by the value it names. A reference to a value
that does not exist leaves its object member out (absent stays absent; explicit null stays null)."""

from __future__ import annotations

import re
from typing import Any

_PART = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]")
_ABSENT = object()


def _walk(value: Any, rest: str) -> Any:
    for m in _PART.finditer(rest):
        name, idx = m.group(1), m.group(2)
        if name is not None:
            if not isinstance(value, dict) or name not in value:
                return _ABSENT
            value = value[name]
        else:
            i = int(idx)
            if not isinstance(value, list) or i >= len(value):
                return _ABSENT
            value = value[i]
    return value


def lookup(ref: str, ctx: dict[str, Any]) -> Any:
    if ref.startswith("$.business_key"):
        return ctx["business_key"]
    if ref.startswith("$.input"):
        return _walk(ctx["input"], ref[len("$.input") :])
    # $.steps.KEY.output...
    body = ref[len("$.steps.") :]
    key, _, rest = body.partition(".output")
    outputs = ctx["steps"]
    if key not in outputs:
        return _ABSENT
    return _walk(outputs[key], rest)


def resolve(mapping: Any, ctx: dict[str, Any]) -> Any:
    """Resolve a mapping; returns ``None`` for a top-level reference that names nothing."""
    out = _resolve(mapping, ctx)
    return None if out is _ABSENT else out


def _resolve(v: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(v, str) and v.startswith("$."):
        return lookup(v, ctx)
    if isinstance(v, dict):
        out = {}
        for k, item in v.items():
            r = _resolve(item, ctx)
            if r is not _ABSENT:
                out[k] = r
        return out
    if isinstance(v, list):
        return [None if (r := _resolve(item, ctx)) is _ABSENT else r for item in v]
    return v
