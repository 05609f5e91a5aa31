"""Tenant JSON Schemas (input and signal contracts), checked at publish and evaluated at run time.

They are evaluated by jsonschema-rs with the linear-time ``regex`` engine (no backtracking:
look-around and back-references are refused at publish), never fetching anything, and are capped in
size and depth before they are compiled. Pure functions (no I/O)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from app import jsonx
from app.errors import FieldError

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 32
MAX_INPUT_ERRORS = 20


def _depth(node: Any) -> int:
    """Nesting depth of a JSON value (iterative; the parser already capped it at ``jsonx.MAX_DEPTH``)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def compile_contract(schema: Any) -> jsonschema_rs.Validator:
    """The linear-time validator of a tenant contract; raises ``ValueError`` when it cannot be one
    (a non-linear ``pattern``, an unresolvable ``$ref``, ...)."""
    try:
        return jsonschema_rs.Draft202012Validator(
            schema, pattern_options=jsonschema_rs.RegexOptions(), offline=True, validate_formats=False
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError) as exc:
        raise ValueError(str(exc).split("\n", 1)[0][:300]) from None


def schema_errors(field: str, schema: Any) -> list[FieldError]:
    """Why ``schema`` cannot be a tenant contract (empty: it can), with field paths under ``field``."""
    if not isinstance(schema, dict | bool):
        return [FieldError(field, "must be a JSON Schema (an object or a boolean)")]
    size = len(jsonx.dumps(schema).encode("utf-8"))
    if size > MAX_SCHEMA_BYTES:
        return [FieldError(field, f"a contract is at most {MAX_SCHEMA_BYTES} bytes of JSON (got {size})")]
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        return [FieldError(field, f"a contract nests at most {MAX_SCHEMA_DEPTH} levels")]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        return [FieldError(field + path, f"invalid JSON Schema: {exc.message}")]
    remote = [
        FieldError(path, "only local references (#...) are allowed in a contract; nothing is fetched")
        for path, ref in _refs(schema, field)
        if not ref.startswith("#")
    ]
    if remote:
        return remote
    try:
        compile_contract(schema)
    except ValueError as exc:
        return [
            FieldError(
                field,
                "this contract cannot be evaluated in linear time (patterns use the RE2-style `regex` "
                f"syntax: no look-around, no back-references): {exc}",
            )
        ]
    return []


def _refs(node: Any, path: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("$ref", "$dynamicRef") and isinstance(v, str):
                out.append((f"{path}.{k}", v))
            else:
                out += _refs(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _refs(v, f"{path}[{i}]")
    return out


# Compiled contracts per process, by their JSON text: every start, signal and schedule launch
# evaluates its version's contract, and compiling one (regexes included) costs far more than the
# evaluation (~80 us for an empty schema, milliseconds with patterns). A contract is at most MAX_SCHEMA_BYTES, so the cache holds at most ~8 MiB.
CONTRACT_CACHE_SIZE = 128


@lru_cache(maxsize=CONTRACT_CACHE_SIZE)
def _compiled(text: str) -> jsonschema_rs.Validator:
    return compile_contract(jsonx.loads(text))


def input_errors(schema: Any, value: Any, prefix: str = "input") -> list[FieldError]:
    """Validate ``value`` against a stored contract in time linear in the value (jsonschema-rs, linear
    regexes); errors name the field path. Call it before taking any instance lock."""
    try:
        validator = _compiled(jsonx.dumps(schema))
        found = []
        for err in validator.iter_errors(value):
            found.append(err)
            if len(found) >= MAX_INPUT_ERRORS:
                break
    except (ValueError, OverflowError):  # e.g. a contract published before the linear-time rule
        return [FieldError(prefix, "the pinned contract cannot be evaluated for this value")]
    out: list[FieldError] = []
    for err in sorted(found, key=lambda e: list(map(str, e.instance_path))):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.instance_path)
        out.append(FieldError(prefix + path, err.message[:300]))
    return out
