"""Input / output mappings (X-DEF): every string ``$.input…``, ``$.business_key`` or
``$.steps.KEY.output…`` inside a mapping is replaced by the value it names. A reference to a value
that does not exist leaves its object member out (absent stays absent; explicit null stays null).

Resolution is bounded: a mapping holds at most ``MAX_REFERENCES`` references (checked at
publish, and again here for documents published before the rule), and the mapped value is measured
while it is built — each referenced value is sized only up to the bytes still left under
``MAX_MAPPED_BYTES`` — so ``["$.input", "$.input", ...]`` stops at the limit instead of producing
N copies of the input. Exceeding either raises ``MappingTooLarge``."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from app.engine.decide.conditions import ABSENT as _ABSENT
from app.engine.decide.conditions import lookup
from app.engine.documents import MAX_REFERENCES

MAX_MAPPED_BYTES = 256 * 1024


class MappingTooLarge(Exception):
    """A mapping would exceed its documented bounds; ``reason`` is the step's failure message."""

    code = "MAPPED_INPUT_TOO_LARGE"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)

    def error(self) -> dict[str, str]:
        return {"code": self.code, "message": self.reason}


def _leaf_size(v: Any) -> int:
    if isinstance(v, str):
        return len(v.encode("utf-8", "surrogatepass")) + 2
    if isinstance(v, bool) or v is None:
        return 5
    if isinstance(v, int):
        return v.bit_length() // 3 + 2  # ~decimal digits without building the string
    if isinstance(v, Decimal):
        return len(v.as_tuple().digits) + 8
    return 8


def json_size(value: Any, limit: int) -> int:
    """Approximate JSON size of ``value`` in bytes, walking at most until ``limit`` is passed (the
    result is then some number > ``limit``): the work is bounded by the budget, not by the value."""
    total = 0
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        item = next(stack[-1], _ABSENT)
        if item is _ABSENT:
            stack.pop()
            continue
        if isinstance(item, dict):
            total += 2 + len(item)
            stack.append(iter(item.items()))
        elif isinstance(item, tuple):  # a (key, value) member of an object
            total += len(item[0]) + 3
            stack.append(iter((item[1],)))
        elif isinstance(item, list):
            total += 2 + len(item)
            stack.append(iter(item))
        else:
            total += _leaf_size(item)
        if total > limit:
            return total
    return total


class _Budget:
    def __init__(self, max_bytes: int) -> None:
        self.left = max_bytes
        self.max_bytes = max_bytes
        self.refs = 0

    def spend(self, value: Any, ref: str | None) -> None:
        if ref is not None:
            self.refs += 1
            if self.refs > MAX_REFERENCES:
                raise MappingTooLarge(f"the mapping holds more than {MAX_REFERENCES} references")
        self.left -= json_size(value, self.left)
        if self.left < 0:
            where = f" (at reference {ref!r})" if ref is not None else ""
            raise MappingTooLarge(f"the mapped value exceeds {self.max_bytes} bytes of JSON{where}")


def resolve(mapping: Any, ctx: dict[str, Any], *, max_bytes: int = MAX_MAPPED_BYTES) -> Any:
    """Resolve a mapping; returns ``None`` for a top-level reference that names nothing. Raises
    ``MappingTooLarge`` past ``MAX_REFERENCES`` references or ``max_bytes`` of mapped JSON."""
    out = _resolve(mapping, ctx, _Budget(max_bytes))
    return None if out is _ABSENT else out


def _resolve(v: Any, ctx: dict[str, Any], budget: _Budget) -> Any:
    if isinstance(v, str) and v.startswith("$."):
        found = lookup(v, ctx)
        if found is not _ABSENT:
            budget.spend(found, v)
        return found
    if isinstance(v, dict):
        out = {}
        for k, item in v.items():
            r = _resolve(item, ctx, budget)
            if r is not _ABSENT:
                budget.spend(k, None)
                out[k] = r
        return out
    if isinstance(v, list):
        return [None if (r := _resolve(item, ctx, budget)) is _ABSENT else r for item in v]
    budget.spend(v, None)
    return v
