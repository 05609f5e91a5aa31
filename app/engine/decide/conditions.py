"""A step's ``condition`` (X-DEF extension, docs/reference.md "Conditions"): a small JSON expression
tree, checked at publish (``check``) and evaluated when the step's dependencies have settled
(``evaluate``). Data, never code: no ``eval``, no string parsed at run time.

A condition is an object with exactly one operator::

    {"==": [a, b]}  {"!=": [a, b]}  {"<": [a, b]}  {"<=": [a, b]}  {">": [a, b]}  {">=": [a, b]}
    {"in": [a, [literal, ...] | "$.ref"]}   {"exists": "$.ref"}
    {"and": [cond, ...]}  {"or": [cond, ...]}  {"not": cond}

An operand is a reference (``$.input…``, ``$.business_key``, ``$.steps.KEY.output…``: the mapping
syntax) or a JSON scalar literal (string, number, boolean, null); a literal list is allowed only as the
right side of ``in``. Evaluation is total (it never raises): a comparison with an absent operand is
false (``!=`` too: test absence with ``exists``), ``<`` ``<=`` ``>`` ``>=`` compare two numbers or two
strings and are false otherwise, ``==`` is JSON equality (``true`` is not ``1``), ``exists`` is true
when the reference names a value that is not ``null``. Bounded: at most ``MAX_NODES`` operators,
``MAX_DEPTH`` levels, ``MAX_LIST`` literals in a list, checked at publish; evaluation visits each
node once and compares values already bounded by the output limits.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

COMPARE = ("==", "!=", "<", "<=", ">", ">=")
ORDER = ("<", "<=", ">", ">=")
OPERATORS = (*COMPARE, "in", "exists", "and", "or", "not")
MAX_DEPTH = 8
MAX_NODES = 64
MAX_LIST = 100
MAX_LITERAL_CHARS = 1024

ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT", "__bool__": lambda self: False})()
_PART = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]")


# --------------------------------------------------------------------------- values named by references
def walk(value: Any, rest: str) -> Any:
    """The value at path ``rest`` (``.name`` / ``[i]`` parts) inside ``value``, or ``ABSENT``."""
    for m in _PART.finditer(rest):
        name, idx = m.group(1), m.group(2)
        if name is not None:
            if not isinstance(value, dict) or name not in value:
                return ABSENT
            value = value[name]
        else:
            i = int(idx)
            if not isinstance(value, list) or i >= len(value):
                return ABSENT
            value = value[i]
    return value


def lookup(ref: str, ctx: Any) -> Any:
    """What reference ``ref`` names in ``ctx`` (``input``, ``business_key``, ``steps``: the outputs of
    the succeeded steps by key), or ``ABSENT``. A skipped step has no output: its references are absent."""
    if ref.startswith("$.business_key"):
        return ctx["business_key"]
    if ref.startswith("$.input"):
        return walk(ctx["input"], ref[len("$.input") :])
    if ref == "$.index" or ref.startswith("$.item"):  # a fan-out element's mapping (``for_each``)
        if ref == "$.index":
            return ctx.get("index", ABSENT)
        return walk(ctx["item"], ref[len("$.item") :]) if "item" in ctx else ABSENT
    body = ref[len("$.steps.") :]
    key, _, rest = body.partition(".output")
    outputs = ctx["steps"]
    if key not in outputs:
        return ABSENT
    return walk(outputs[key], rest)


# --------------------------------------------------------------------------- publish-time check
def _is_ref(v: Any) -> bool:
    return isinstance(v, str) and v.startswith("$.")


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, Decimal)) or isinstance(v, str)


def check(cond: Any, path: str = "condition") -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Problems of condition ``cond`` as ``(field, message)`` and its references as ``(field, ref)``
    (the caller checks each reference against the step's dependencies). Stops descending past
    ``MAX_DEPTH`` / ``MAX_NODES``."""
    problems: list[tuple[str, str]] = []
    refs: list[tuple[str, str]] = []
    nodes = 0

    def operand(v: Any, f: str, op: str, *, list_ok: bool = False) -> None:
        if _is_ref(v):
            refs.append((f, v))
        elif isinstance(v, list):
            if not list_ok:
                problems.append(
                    (f, f"{op!r} does not compare a literal list: a list may only be the right side of 'in'")
                )
            elif len(v) > MAX_LIST:
                problems.append((f, f"a literal list holds at most {MAX_LIST} values (got {len(v)})"))
            else:
                for i, item in enumerate(v):
                    if _is_ref(item) or not _scalar(item):
                        problems.append(
                            (f"{f}[{i}]", "a literal list holds strings, numbers, booleans or null")
                        )
                    elif isinstance(item, str) and len(item) > MAX_LITERAL_CHARS:
                        problems.append(
                            (f"{f}[{i}]", f"a literal string has at most {MAX_LITERAL_CHARS} characters")
                        )
        elif isinstance(v, dict):
            problems.append((f, "an operand is a reference ($.…) or a literal, not an object"))
        elif isinstance(v, str) and len(v) > MAX_LITERAL_CHARS:
            problems.append((f, f"a literal string has at most {MAX_LITERAL_CHARS} characters"))

    def node(c: Any, f: str, depth: int) -> None:
        nonlocal nodes
        nodes += 1
        if nodes > MAX_NODES:
            if nodes == MAX_NODES + 1:
                problems.append((path, f"a condition holds at most {MAX_NODES} operators"))
            return
        if depth > MAX_DEPTH:
            problems.append((f, f"a condition nests at most {MAX_DEPTH} levels"))
            return
        if not isinstance(c, dict) or len(c) != 1:
            problems.append(
                (
                    f,
                    'a condition is an object with exactly one operator, e.g. {">": ["$.input.amount", 1000]}',
                )
            )
            return
        op, arg = next(iter(c.items()))
        g = f"{f}.{op}"
        if op not in OPERATORS:
            problems.append((g, f"unknown operator {str(op)[:20]!r}: one of {', '.join(OPERATORS)}"))
            return
        if op in ("and", "or"):
            if not isinstance(arg, list) or not 1 <= len(arg) <= 16:
                problems.append((g, "an array of 1 to 16 conditions"))
                return
            for i, sub in enumerate(arg):
                node(sub, f"{g}[{i}]", depth + 1)
        elif op == "not":
            node(arg, g, depth + 1)
        elif op == "exists":
            if not _is_ref(arg):
                problems.append((g, "a reference ($.input…, $.business_key or $.steps.KEY.output…)"))
            else:
                refs.append((g, arg))
        else:
            if not isinstance(arg, list) or len(arg) != 2:
                problems.append((g, "an array of two operands [left, right]"))
                return
            if op in ORDER:
                for i, v in enumerate(arg):
                    if isinstance(v, bool) or v is None:
                        problems.append((f"{g}[{i}]", f"{op!r} orders numbers or strings, not {_lit(v)}"))
            operand(arg[0], f"{g}[0]", op)
            operand(arg[1], f"{g}[1]", op, list_ok=op == "in")
            if op == "in" and not (_is_ref(arg[1]) or isinstance(arg[1], list)):
                problems.append((f"{g}[1]", "a literal list or a reference to a list"))

    node(cond, path, 1)
    return problems, refs


# --------------------------------------------------------------------------- evaluation
def _num(v: Any) -> bool:
    return isinstance(v, (int, float, Decimal)) and not isinstance(v, bool)


def _eq(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers; 1 == 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _num(a) and _num(b):
        return Decimal(str(a)) == Decimal(str(b)) if isinstance(a, float) or isinstance(b, float) else a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_eq(a[k], b[k]) for k in a)
    return bool(a == b)


def _order(op: str, a: Any, b: Any) -> bool:
    if not ((_num(a) and _num(b)) or (isinstance(a, str) and isinstance(b, str))):
        return False
    if isinstance(a, float) or isinstance(b, float):
        a, b = Decimal(str(a)), Decimal(str(b))
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a >= b)


def evaluate(cond: Any, ctx: Any) -> bool:
    """The value of a condition checked at publish, over ``ctx`` (see ``lookup``). Never raises."""

    def val(v: Any) -> Any:
        return lookup(v, ctx) if _is_ref(v) else v

    def ev(c: Any) -> bool:
        if not isinstance(c, dict) or len(c) != 1:
            return False
        op, arg = next(iter(c.items()))
        if op == "and":
            return all(ev(x) for x in arg)
        if op == "or":
            return any(ev(x) for x in arg)
        if op == "not":
            return not ev(arg)
        if op == "exists":
            v = val(arg)
            return v is not ABSENT and v is not None
        left, right = val(arg[0]), val(arg[1])
        if left is ABSENT or right is ABSENT:
            return False
        if op == "==":
            return _eq(left, right)
        if op == "!=":
            return not _eq(left, right)
        if op == "in":
            return isinstance(right, list) and any(_eq(left, x) for x in right)
        return _order(op, left, right)

    return ev(cond)


def describe(cond: Any, limit: int = 200) -> str:
    """A short text of a condition for a skip reason (bounded)."""

    def text(c: Any) -> str:
        if not isinstance(c, dict) or len(c) != 1:
            return "?"
        op, arg = next(iter(c.items()))
        if op in ("and", "or"):
            return "(" + f" {op} ".join(text(x) for x in arg) + ")"
        if op == "not":
            return f"not {text(arg)}"
        if op == "exists":
            return f"exists {arg}"
        return f"{_lit(arg[0])} {op} {_lit(arg[1])}"

    out = text(cond)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def _lit(v: Any) -> str:
    if _is_ref(v):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_lit(x) for x in v[:5]) + (", …]" if len(v) > 5 else "]")
    if isinstance(v, str):
        return repr(v[:40])
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    return str(v)
