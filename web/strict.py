"""Strict request parsing (SPEC W-API-2), shared by every API of the product: the HTTP part (media type,
size, exact JSON, query strings) around ``schemas.load``.

- ``@body(Schema)``: ``Content-Type: application/json`` (else 415), at most 512 KiB (else 413), duplicate
  fields, case-variant aliases of declared fields and undeclared fields → 400 INVALID_ARGUMENT naming the
  field; numbers never pass through float (ints stay ``int``, fractions become ``Decimal``); numbers out
  of range, lone surrogates and nesting deeper than 64 → 400 naming the field (``app.jsonx``).
  The view receives ``body=<loaded dict>``.
- ``@query(Schema)``: undeclared, case-variant or repeated query parameters → 400; ``query=<dict>``.
  An endpoint without ``@query`` accepts no query parameter at all (checked by ``web.auth``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from flask import request
from marshmallow import Schema, ValidationError

from app import jsonx
from app.errors import BodyTooLarge, FieldError, InvalidArgument, UnsupportedMediaType
from schemas import declared, flatten, load
from web.meta import meta

MAX_BODY_BYTES = 512 * 1024


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
    raw = request.get_data(cache=True)
    if len(raw) > MAX_BODY_BYTES:
        raise BodyTooLarge("request body exceeds 512 KiB")
    if not raw.strip():
        raise InvalidArgument("a JSON object body is required", field="body")
    try:
        return jsonx.loads(raw)
    except jsonx.DuplicateKey as exc:
        raise InvalidArgument(errors=[FieldError(exc.key, "duplicate field")]) from None
    except jsonx.BadJSON as exc:
        raise InvalidArgument(errors=[FieldError(exc.field, str(exc))]) from None


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
