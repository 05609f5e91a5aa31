"""Identifiers: 32-char lowercase hex ids."""

from __future__ import annotations

import re
import uuid

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def new_id() -> str:
    return uuid.uuid4().hex


def is_hex32(value: str) -> bool:
    return bool(HEX32.fullmatch(value))


def new_request_id() -> str:
    """A request id echoed in ``X-Request-Id`` and every error body (``req_`` + 32 hex)."""
    return "req_" + uuid.uuid4().hex
