"""The API's request and response shapes (marshmallow), shared by the HTTP API (``web``), the operator
console and the ``ledgerflow`` CLI; no Flask here, so the CLI validates with the API's own rules and
messages without loading the web layer.

- ``schemas.base``: the strict request / loose response bases, the envelope and the one-rule fields.
- ``schemas.<resource>``: the request and response schemas of one API resource (the blueprint
  ``web/<resource>.py`` validates with them).
- ``load(schema, data)`` (here): strict loading of an already-parsed JSON value (SPEC W-API-2): undeclared
  fields and case-variant aliases are refused by name; marshmallow's messages become field errors.
  ``web.strict`` adds the HTTP part (media type, size, exact JSON, query strings).
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields

from app.errors import FieldError, InvalidArgument


def declared(schema: Schema) -> dict[str, fields.Field]:
    """The fields a request may carry, by their JSON name."""
    return {(f.data_key or name): f for name, f in schema.fields.items() if not f.dump_only}


def _nested_schema(field: fields.Field) -> Schema | None:
    if isinstance(field, fields.Nested):
        s = field.schema
        return s if isinstance(s, Schema) else None
    return None


def check_names(data: Any, schema: Schema, path: str = "") -> list[FieldError]:
    """Unknown fields and case-variant aliases, recursively through Nested / List(Nested)."""
    errors: list[FieldError] = []
    if not isinstance(data, dict):
        return errors
    names = declared(schema)
    lowered = {k.lower(): k for k in names}
    for key, value in data.items():
        where = f"{path}{key}"
        field = names.get(key)
        if field is None:
            canonical = lowered.get(key.lower())
            if canonical is not None:
                errors.append(FieldError(where, f"case-variant alias of {canonical!r} is not accepted"))
            else:
                errors.append(FieldError(where, "unknown field"))
            continue
        nested = _nested_schema(field)
        if nested is not None:
            errors += check_names(value, nested, where + ".")
        elif isinstance(field, fields.List) and isinstance(value, list):
            inner = _nested_schema(field.inner)
            if inner is not None:
                for i, item in enumerate(value):
                    errors += check_names(item, inner, f"{where}[{i}].")
    return errors


def flatten(messages: Any, path: str = "") -> list[FieldError]:
    """marshmallow messages → [FieldError] with dotted paths (``items[0].id``)."""
    out: list[FieldError] = []
    if isinstance(messages, dict):
        for key, value in messages.items():
            if key == "_schema":
                sub = path.rstrip(".") or "body"
            elif isinstance(key, int):
                sub = f"{path.rstrip('.')}[{key}]"
            else:
                sub = f"{path}{key}"
            if isinstance(value, dict):
                out += flatten(value, sub + ".")
            else:
                for msg in value if isinstance(value, list) else [value]:
                    out.append(FieldError(sub.rstrip("."), str(msg)))
    elif isinstance(messages, list):
        for msg in messages:
            out.append(FieldError(path.rstrip(".") or "body", str(msg)))
    return out


def load(schema: Schema, data: Any, *, partial: bool = False) -> dict[str, Any]:
    errors = check_names(data, schema)
    if errors:
        raise InvalidArgument(errors=errors)
    try:
        return schema.load(data, partial=partial)
    except ValidationError as exc:
        raise InvalidArgument(errors=flatten(exc.messages)) from None
