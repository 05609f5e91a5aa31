"""Strict request parsing (SPEC W-API-2), shared by every API of the product: the HTTP part (media type,
size, exact JSON, query strings) around ``schemas.load``.

- ``@body(Schema)``: ``Content-Type: application/json`` (else 415), at most 512 KiB (else 413), duplicate
  fields, case-variant aliases of declared fields and undeclared fields → 400 INVALID_ARGUMENT naming the
  field; numbers never pass through float (ints stay ``int``, fractions become ``Decimal``); numbers out
  of range, lone surrogates and nesting deeper than 64 → 400 naming the field (``app.jsonx``).
  The view receives ``body=<loaded dict>``.
- ``@query(Schema)``: undeclared, case-variant or repeated query parameters → 400; ``query=<dict>``.
  An endpoint without ``@query`` accepts no query parameter at all (checked by ``web.auth``).

The one input layer: a string PostgreSQL or the code cannot hold — a NUL character or a lone
UTF-16 surrogate — is refused with 400 naming the field wherever it comes from: any string (or field
name) of a JSON body, any query parameter (name or value: ``check_query``) and any path segment
(``check_path``); the app runs both before every view, the console's included. A query parameter that
is not text (a number, a time, a boolean) must be written in ASCII: ``limit=５`` (full-width digits,
which ``int()`` takes) is a 400 naming ``limit``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flask import request
from marshmallow import Schema, ValidationError, fields
from werkzeug.datastructures import MultiDict

from app import jsonx
from app.errors import BodyTooLarge, FieldError, InvalidArgument, UnsupportedMediaType
from schemas import declared, flatten, load
from web.meta import meta

MAX_BODY_BYTES = 512 * 1024
_SURROGATE = re.compile("[\ud800-\udfff]")


# --------------------------------------------------------------------------- the input layer
def string_problem(value: str) -> str | None:
    """Why ``value`` cannot be taken as a string (PostgreSQL cannot store NUL; a lone surrogate is not
    Unicode text), or None."""
    if "\x00" in value:
        return "must not contain the NUL character"
    if _SURROGATE.search(value):
        return "must not contain a lone UTF-16 surrogate"
    return None


def _unstorable_strings(root: Any) -> list[FieldError]:
    """Every string (and field name) of a parsed JSON body that ``string_problem`` refuses, by path."""
    errors: list[FieldError] = []
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack and len(errors) < 10:
        value, path = stack.pop()
        if isinstance(value, str):
            if (why := string_problem(value)) is not None:
                errors.append(FieldError(path or "body", why))
        elif isinstance(value, dict):
            for k, v in value.items():
                where = f"{path}.{k}" if path else str(k)
                if (why := string_problem(k)) is not None:
                    errors.append(FieldError(path or "body", f"a field name {why}"))
                else:
                    stack.append((v, where))
        elif isinstance(value, list):
            stack.extend((v, f"{path or 'body'}[{i}]") for i, v in enumerate(value))
    return errors


def check_path(view_args: Mapping[str, Any] | None) -> None:
    """400 naming the path parameter that holds a string ``string_problem`` refuses."""
    errors = [
        FieldError(name, why)
        for name, value in (view_args or {}).items()
        if isinstance(value, str) and (why := string_problem(value)) is not None
    ]
    if errors:
        raise InvalidArgument(errors=errors)


def check_query(args: MultiDict[str, str]) -> None:
    """400 naming the query parameter whose name or a value ``string_problem`` refuses: for every route,
    the console's pages (which read their query strings themselves) as much as the API's."""
    errors: list[FieldError] = []
    for key in args:
        if (why := string_problem(key)) is not None:
            errors.append(FieldError("query", f"a parameter name {why}"))
        elif (why := next((w for v in args.getlist(key) if (w := string_problem(v))), None)) is not None:
            errors.append(FieldError(key, why))
    if errors:
        raise InvalidArgument(errors=errors)


# --------------------------------------------------------------------------- body
def read_json_body() -> Any:
    """The request body as exact JSON, after media type and size checks."""
    if request.mimetype != "application/json":
        raise UnsupportedMediaType("Content-Type must be application/json")
    charset = request.mimetype_params.get("charset")
    if charset is not None and charset.lower() not in ("utf-8", "utf8"):
        raise UnsupportedMediaType("only UTF-8 JSON is accepted")
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise BodyTooLarge("request body exceeds 512 KiB")
    # a body without Content-Length (chunked) is read up to MAX_BODY_BYTES + 1 (the app's
    # MAX_CONTENT_LENGTH): one byte more than the limit means it was too large, not truncated JSON
    raw = request.get_data(cache=True)
    if len(raw) > MAX_BODY_BYTES:
        raise BodyTooLarge("request body exceeds 512 KiB")
    if not raw.strip():
        raise InvalidArgument("a JSON object body is required", field="body")
    try:
        value = jsonx.loads(raw)  # lone surrogates are refused here, naming the field
    except jsonx.DuplicateKey as exc:
        raise InvalidArgument(errors=[FieldError(exc.key, "duplicate field")]) from None
    except jsonx.BadJSON as exc:
        raise InvalidArgument(errors=[FieldError(exc.field, str(exc))]) from None
    # JSON can carry NUL only as the escape \u0000 (a raw control character is not JSON)
    if b"\\u0000" in raw and (errors := _unstorable_strings(value)):
        raise InvalidArgument(errors=errors)
    return value


def parse_body(schema: Schema) -> dict[str, Any]:
    data = read_json_body()
    if not isinstance(data, dict):
        raise InvalidArgument("the body must be a JSON object", field="body")
    return load(schema, data)


def body(schema_cls: type[Schema]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    schema = schema_cls()

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs["body"] = parse_body(schema)
            return fn(*args, **kwargs)

        meta(wrapper)["body"] = schema_cls
        return wrapper

    return deco


# --------------------------------------------------------------------------- query
def parse_query(schema: Schema | None, allowed_extra: Iterable[str] = ()) -> dict[str, Any]:
    args = request.args
    names = declared(schema) if schema is not None else {}
    allowed = set(names) | set(allowed_extra)
    lowered = {k.lower(): k for k in allowed}
    errors: list[FieldError] = []
    data: dict[str, Any] = {}
    for key in args:
        values = args.getlist(key)
        if (why := string_problem(key)) is not None:
            errors.append(FieldError("query", f"a parameter name {why}"))
            continue
        bad = next((w for v in values if (w := string_problem(v)) is not None), None)
        if bad is not None:
            errors.append(FieldError(key, bad))
            continue
        if key not in allowed:
            canonical = lowered.get(key.lower())
            msg = (
                f"case-variant alias of {canonical!r} is not accepted"
                if canonical
                else "unknown query parameter"
            )
            errors.append(FieldError(key, msg))
        elif len(values) > 1:
            errors.append(FieldError(key, "query parameter given more than once"))
        elif key in names:
            if not isinstance(names[key], fields.String) and not values[0].isascii():
                # int() and fromisoformat() take other scripts' digits (``５``): not a number here
                errors.append(FieldError(key, "must be written with ASCII characters (digits 0-9)"))
                continue
            data[key] = values[0]
    if errors:
        raise InvalidArgument(errors=errors)
    if schema is None:
        return {}
    try:
        return schema.load(data)
    except ValidationError as exc:
        raise InvalidArgument(errors=flatten(exc.messages)) from None


def reject_undeclared_query(endpoint_meta: dict[str, Any]) -> None:
    """Called by ``web.auth``: an endpoint without ``@query`` accepts no query parameters."""
    if "query" not in endpoint_meta and request.args:
        parse_query(None)


def query(schema_cls: type[Schema]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    schema = schema_cls()

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs["query"] = parse_query(schema)
            return fn(*args, **kwargs)

        meta(wrapper)["query"] = schema_cls
        return wrapper

    return deco
