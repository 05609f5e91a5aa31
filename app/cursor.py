"""Opaque pagination cursors bound to the query that produced them (SPEC W-AUDIT-1, L-OPS).

A cursor is ``base64url(json position) . mac``; the MAC covers the position *and* the binding
(namespace, filters, kind), so a cursor is refused (400 INVALID_ARGUMENT, field ``cursor``) when
tampered with or presented with other filters or to another resource.
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


def decode(cursor: str, binding: Any) -> dict[str, Any]:
    bad = InvalidArgument("cursor is malformed or belongs to another query", field="cursor")
    if len(cursor.encode("utf-8", "surrogatepass")) > MAX_CURSOR_BYTES or cursor.count(".") != 1:
        raise bad
    payload, mac = cursor.split(".")
    if not hmac.compare_digest(mac, _mac(payload, binding)):
        raise bad
    try:
        pos = jsonx.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, TypeError):
        raise bad from None
    if not isinstance(pos, dict):
        raise bad
    return pos


def parse_time(value: Any) -> datetime:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument("cursor is malformed", field="cursor") from None
