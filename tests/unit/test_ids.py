"""app.ids makes the ids ``uuid`` made before, without its objects: same format, same derivation."""

from __future__ import annotations

import uuid

from app.engine.row_access import step_row_id
from app.ids import HEX32, name_id, new_id, new_request_id


def test_new_id_is_a_uuid4_hex() -> None:
    for _ in range(200):
        i = new_id()
        assert HEX32.fullmatch(i)
        u = uuid.UUID(hex=i)
        assert u.version == 4 and u.variant == uuid.RFC_4122
        assert u.hex == i
    assert len({new_id() for _ in range(1000)}) == 1000


def test_request_id() -> None:
    rid = new_request_id()
    assert rid.startswith("req_") and uuid.UUID(hex=rid[4:]).version == 4


def test_name_id_is_uuid5() -> None:
    ns = uuid.UUID("6c1f7e0a-3b5d-4f3e-9a57-2d0c8b1e4f60")
    for name in ("a/b", "0123456789abcdef0123456789abcdef/step-1", "é/ü", ""):
        assert name_id(ns.bytes, name) == uuid.uuid5(ns, name).hex


def test_step_row_id_unchanged() -> None:
    # the ids of rows stored by earlier releases: a step's id is derived, so it must never change
    iid = "0123456789abcdef0123456789abcdef"
    expected = uuid.uuid5(uuid.UUID("6c1f7e0a-3b5d-4f3e-9a57-2d0c8b1e4f60"), f"{iid}/fetch").hex
    assert step_row_id(iid, "fetch") == expected
