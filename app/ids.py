"""Identifiers: 32-char lowercase hex ids."""

from __future__ import annotations

import re
import secrets
import uuid

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def new_id() -> str:
    return uuid.uuid4().hex


def new_node_id() -> str:
    """A worker node's registry id: 16 lowercase hex (64 random bits). Every final attempt row and
    every running job names its node (``worker_id``), so the id is half the size of ``new_id()``: 17
    bytes a row instead of 33. 64 bits keep a clash among a million nodes below 1e-7."""
    return secrets.token_hex(8)


def is_hex32(value: str) -> bool:
    return bool(HEX32.fullmatch(value))


def new_request_id() -> str:
    """A request id echoed in ``X-Request-Id`` and every error body (``req_`` + 32 hex)."""
    return "req_" + uuid.uuid4().hex
