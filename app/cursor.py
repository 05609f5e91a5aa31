"""Opaque pagination cursors bound to the query that produced them (SPEC W-AUDIT-1, L-OPS).

A cursor is ``base64url(json position) . mac``; the MAC covers the position *and* the binding
(namespace, filters, kind), so a cursor is refused (400 INVALID_ARGUMENT, field ``cursor``) when
tampered with or presented with other filters or to another resource.

Decoding is defensive whatever key signed the cursor (the built-in development key is
public, so a cursor with a valid MAC can still carry anything): the caller names the position's fields
and their kinds (``decode(c, binding, t=TIME, i=TEXT)``), and a cursor that is not ASCII, not
``payload.mac``, has other fields, or a field of another kind or out of range (a string where a time
belongs, ``1e30``, a NUL) is the same 400, never a server error.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime
from typing import Any

from app import jsonx
from app.errors import InvalidArgument
from app.settings import CURSOR_SECRET

MAX_CURSOR_BYTES = 1024
# The signing key comes from configuration; the built-in key is for development only (a production
# web process refuses to start without its own: ``app.settings.refuse_unsafe_production``).
_SECRET = CURSOR_SECRET.get().encode()

# the kinds of a position's fields
TIME = "time"  # an ISO 8601 / RFC 3339 time with an offset -> datetime
TEXT = "text"  # 1-256 characters without NUL -> str
INT = "int"  # 0 .. 2^63 - 1 (a bigint) -> int
MAX_TEXT = 256
MAX_INT = 2**63 - 1


def _mac(payload: str, binding: Any) -> str:
    msg = payload + "|" + jsonx.dumps(_canon(binding))
    return hmac.new(_SECRET, msg.encode(), hashlib.sha256).hexdigest()[:24]


def _canon(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _canon(o[k]) for k in sorted(o)}
    if isinstance(o, list | tuple):
        return [_canon(v) for v in o]
    return o


def encode(position: dict[str, Any], binding: Any) -> str:
    payload = base64.urlsafe_b64encode(jsonx.dumps(position).encode()).decode().rstrip("=")
    return f"{payload}.{_mac(payload, binding)}"


def _bad() -> InvalidArgument:
    return InvalidArgument("cursor is malformed or belongs to another query", field="cursor")


def _time(value: Any) -> datetime:
    if not isinstance(value, str) or not value.isascii() or not 1 <= len(value) <= 64:
        raise _bad()
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _bad() from None
    if at.tzinfo is None:
        raise _bad()
    return at


def _text(value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TEXT or "\x00" in value:
        raise _bad()
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise _bad()
    return value


_KINDS = {TIME: _time, TEXT: _text, INT: _int}


def decode(cursor: str, binding: Any, **shape: str) -> dict[str, Any]:
    """The position of ``cursor``, each field of ``shape`` (name -> kind) parsed; any other cursor is a
    400 naming ``cursor``."""
    if (
        not isinstance(cursor, str)
        or not cursor.isascii()
        or len(cursor) > MAX_CURSOR_BYTES
        or cursor.count(".") != 1
    ):
        raise _bad()
    payload, mac = cursor.split(".")
    if not hmac.compare_digest(mac.encode(), _mac(payload, binding).encode()):
        raise _bad()
    try:
        pos = jsonx.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, TypeError):
        raise _bad() from None
    if not isinstance(pos, dict) or set(pos) != set(shape):
        raise _bad()
    return {name: _KINDS[kind](pos[name]) for name, kind in shape.items()}
