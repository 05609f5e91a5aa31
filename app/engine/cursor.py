"""Opaque list cursors bound to the namespace and the filters they were issued for."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime
from typing import Any

from app.errors import InvalidArgument

MAX_CURSOR = 1024


def _binding_hash(binding: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(binding, sort_keys=True).encode()).hexdigest()[:24]


def encode_cursor(binding: dict[str, Any], created_at: datetime, last_id: str) -> str:
    doc = {"b": _binding_hash(binding), "c": created_at.isoformat(), "i": last_id}
    return base64.urlsafe_b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, binding: dict[str, Any]) -> tuple[datetime, str]:
    bad = InvalidArgument("invalid cursor: it belongs to another query or was altered", field="cursor")
    if len(cursor) > MAX_CURSOR:
        raise bad
    try:
        doc = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if doc["b"] != _binding_hash(binding):
            raise bad
        return datetime.fromisoformat(doc["c"]), str(doc["i"])
    except InvalidArgument:
        raise
    except Exception:  # noqa: BLE001 - any malformed cursor is a client error
        raise bad from None
