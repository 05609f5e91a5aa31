"""Identifiers: 32-char lowercase hex ids."""

from __future__ import annotations

import hashlib
import os
import re
import secrets

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def _versioned(raw: bytes, version: int) -> str:
    """The hex of an RFC 4122 UUID of ``version`` made of the 16 bytes ``raw`` (what ``uuid.UUID(bytes=raw,
    version=version).hex`` returns, without the UUID object and its int conversions: a start makes a
    dozen ids)."""
    b = bytearray(raw)
    b[6] = (b[6] & 0x0F) | (version << 4)
    b[8] = (b[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return b.hex()


def new_id() -> str:
    """A random id: ``uuid.uuid4().hex`` (122 random bits from ``os.urandom``), made cheaper."""
    return _versioned(os.urandom(16), 4)


def name_id(namespace: bytes, name: str) -> str:
    """A name-derived id: ``uuid.uuid5(uuid.UUID(bytes=namespace), name).hex``, made cheaper."""
    return _versioned(hashlib.sha1(namespace + name.encode("utf-8"), usedforsecurity=False).digest()[:16], 5)


def new_node_id() -> str:
    """A worker node's registry id: 16 lowercase hex (64 random bits). Every final attempt row and
    every running job names its node (``worker_id``), so the id is half the size of ``new_id()``: 17
    bytes a row instead of 33. 64 bits keep a clash among a million nodes below 1e-7."""
    return secrets.token_hex(8)


def is_hex32(value: str) -> bool:
    return bool(HEX32.fullmatch(value))


def new_request_id() -> str:
    """A request id echoed in ``X-Request-Id`` and every error body (``req_`` + 32 hex)."""
    return "req_" + new_id()
