"""Definition documents are read from the database once per process: published versions are
immutable, so every later advance and start reuses the text, parsed into a fresh object each time."""

from __future__ import annotations

from sqlalchemy import text

from app.db import transaction
from app.engine import row_access
from app.ids import new_id
from tests.engine.helpers import publish, statements_seen

NS = "ns-" + new_id()[:8]
DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 3600,
    "steps": [{"key": "work", "kind": "TASK", "queue": "doc-cache-q"}],
}


def _version_id(engine, def_id: str) -> str:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT id FROM workflow_definition_versions WHERE definition_id = :d"), {"d": def_id}
        ).scalar_one()


def test_a_version_document_is_read_once_and_handed_out_as_fresh_objects(eng):
    vid = _version_id(eng, publish(eng, NS, DOC))
    with statements_seen(eng) as seen:
        with transaction(eng) as conn:
            first = row_access.version_document(conn, vid)
            first["steps"][0]["queue"] = "changed by a caller"
            second = row_access.version_document(conn, vid)
        with transaction(eng) as conn:
            third = row_access.version_document(conn, vid)
    reads = [s for s in seen if "FROM workflow_definition_versions" in s]
    assert len(reads) == 1  # the first call only
    assert second == third == DOC  # the caller's change reached neither
    assert second is not third


def test_the_cache_is_bounded_by_characters_and_skips_a_huge_document(eng, monkeypatch):
    vid = _version_id(eng, publish(eng, NS, DOC))
    small = row_access.LRUCache(maxsize=64, getsizeof=len)
    monkeypatch.setattr(row_access, "_documents", small)
    monkeypatch.setattr(row_access, "DOCUMENT_CACHE_CHARS", 64)  # the stored document is longer than 64 // 16
    with transaction(eng) as conn:
        assert row_access.version_document(conn, vid)["steps"][0]["key"] == "work"
    assert vid not in small and small.currsize == 0
    for i in range(20):  # filling past the bound evicts the oldest entries
        small[f"v{i}"] = "x" * 10
    assert small.currsize <= 64 and "v0" not in small and "v19" in small
