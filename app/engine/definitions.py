"""Workflow definitions and immutable versions (X-DEF), stored per namespace."""

from __future__ import annotations

import re
import threading
from typing import Any

from cachetools import LRUCache
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from app import cursor as cursors
from app import jsonx
from app.engine.documents import VERSION_RE, validate_document
from app.errors import FieldError, InvalidArgument, NotFound, StateConflict
from app.ids import is_hex32, new_id
from app.jsonx import rfc3339
from app.sql import query, run

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:-]{0,127}$")


_DEFINITION_INSERT = query(
    "definition_insert",
    "INSERT INTO workflow_definitions (id, namespace_id, name, description) VALUES (:id, :ns, :n, :d)",
)


def create_definition(conn: Connection, namespace_id: str, name: Any, description: Any = None) -> dict:
    errors = []
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or name != name.strip():
        errors.append(FieldError("name", "required: 1-128 characters (letters, digits, space _ . : -)"))
    if description is not None and (
        not isinstance(description, str) or len(description) > 2000 or "\x00" in description
    ):
        errors.append(FieldError("description", "must be a string of at most 2000 characters"))
    if errors:
        raise InvalidArgument(errors=errors)
    def_id = new_id()
    with conn.begin_nested():
        try:
            run(
                conn,
                _DEFINITION_INSERT,
                {"id": def_id, "ns": namespace_id, "n": name, "d": description},
            )
        except IntegrityError:
            raise StateConflict(f"a definition named {name!r} already exists in this namespace") from None
    return get_definition(conn, namespace_id, def_id)


def _asked(value: str) -> str:
    return repr(value if len(value) <= 64 else value[:64] + "…")


def definition_not_found(definition_id: str) -> NotFound:
    return NotFound(
        f"definition {_asked(definition_id)} not found in this namespace "
        "(GET /v1/workflow-definitions?name=... finds a definition by name)"
    )


_DEFINITION_READ = query(
    "definition_read",
    "SELECT * FROM workflow_definitions WHERE id = :id AND namespace_id = :ns",
)


_DEFINITION_VERSIONS_READ = query(
    "definition_versions_read",
    "SELECT id, version, queues, created_at FROM workflow_definition_versions "
    "WHERE definition_id = :id ORDER BY created_at, id",
)


def get_definition(conn: Connection, namespace_id: str, definition_id: str) -> dict:
    if not is_hex32(definition_id):
        raise definition_not_found(definition_id)
    row = run(
        conn,
        _DEFINITION_READ,
        {"id": definition_id, "ns": namespace_id},
    ).first()
    if row is None:
        raise definition_not_found(definition_id)
    versions = run(
        conn,
        _DEFINITION_VERSIONS_READ,
        {"id": definition_id},
    ).all()
    out = {
        "id": row.id,
        "namespace_id": row.namespace_id,
        "name": row.name,
        "versions": [
            {"id": v.id, "version": v.version, "queues": list(v.queues), "created_at": rfc3339(v.created_at)}
            for v in versions
        ],
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }
    if row.description is not None:
        out["description"] = row.description
    return out


_DEFINITION_LOCK = query(
    "definition_lock",
    "SELECT id FROM workflow_definitions WHERE id = :id AND namespace_id = :ns FOR UPDATE",
)


_DEFINITION_VERSION_BY_DOCUMENT = query(
    "definition_version_by_document",
    "SELECT v.id FROM workflow_definition_versions v JOIN workflow_definitions d ON d.id = "
    "v.definition_id "
    "WHERE d.id = :d AND d.namespace_id = :ns AND v.version = :v",
)


_DEFINITION_VERSION_EXISTS = query(
    "definition_version_exists",
    "SELECT 1 FROM workflow_definition_versions WHERE definition_id = :d AND version = :v",
)


_DEFINITION_VERSION_INSERT = query(
    "definition_version_insert",
    "INSERT INTO workflow_definition_versions (id, definition_id, namespace_id, version, document, "
    "queues) "
    "VALUES (:id, :d, :ns, :v, CAST(:doc AS jsonb), CAST(:q AS text[]))",
)


_DEFINITION_TOUCH = query(
    "definition_touch",
    "UPDATE workflow_definitions SET updated_at = now() WHERE id = :id",
)


def publish_version(conn: Connection, namespace_id: str, definition_id: str, document: Any) -> dict:
    """Validate the whole graph, check SUBWORKFLOW targets exist, store an immutable version."""
    run(
        conn,
        _DEFINITION_LOCK,
        {"id": definition_id, "ns": namespace_id},
    )
    get_definition(conn, namespace_id, definition_id)
    doc, queues = validate_document(document)
    if "\\u0000" in jsonx.dumps(doc):
        raise InvalidArgument("NUL characters cannot be stored in a version document", field="$")
    errors = []
    for i, st in enumerate(doc["steps"]):
        if st["kind"] != "SUBWORKFLOW":
            continue
        target = run(
            conn,
            _DEFINITION_VERSION_BY_DOCUMENT,
            {"d": st["definition_id"], "ns": namespace_id, "v": st["version"]},
        ).first()
        if target is None:
            errors.append(
                FieldError(f"steps[{i}].version", "no such published definition version in this namespace")
            )
    if errors:
        raise InvalidArgument(errors=errors)
    exists = run(
        conn,
        _DEFINITION_VERSION_EXISTS,
        {"d": definition_id, "v": doc["version"]},
    ).first()
    if exists:
        raise StateConflict(f"version {doc['version']!r} is already published; versions are immutable")
    vid = new_id()
    run(
        conn,
        _DEFINITION_VERSION_INSERT,
        {
            "id": vid,
            "d": definition_id,
            "ns": namespace_id,
            "v": doc["version"],
            "doc": jsonx.dumps(doc),
            "q": queues,
        },
    )
    run(conn, _DEFINITION_TOUCH, {"id": definition_id})
    return get_version(conn, namespace_id, definition_id, doc["version"])


_DEFINITION_EXISTS = query(
    "definition_exists",
    "SELECT 1 FROM workflow_definitions WHERE id = :id AND namespace_id = :ns",
)


_DEFINITION_VERSIONS_NAMES = query(
    "definition_versions_names",
    "SELECT version FROM workflow_definition_versions WHERE definition_id = :d ORDER BY created_at, id",
)


def version_not_found(conn: Connection, namespace_id: str, definition_id: str, version: str) -> NotFound:
    """Names the version asked for and the versions that exist (or that the definition does not)."""
    if not is_hex32(definition_id):
        return definition_not_found(definition_id)
    exists = run(
        conn,
        _DEFINITION_EXISTS,
        {"id": definition_id, "ns": namespace_id},
    ).first()
    if exists is None:
        return definition_not_found(definition_id)
    published = (
        run(
            conn,
            _DEFINITION_VERSIONS_NAMES,
            {"d": definition_id},
        )
        .scalars()
        .all()
    )
    listed = ", ".join(published[-20:]) if published else "none yet"
    if len(published) > 20:
        listed = "…, " + listed
    return NotFound(
        f"definition {definition_id} has no version {_asked(version)}; published versions: {listed}"
    )


# A published version never changes and a definition never moves to another namespace (nothing updates or
# deletes either), so each process keeps the versions it has read, by (namespace, definition, version):
# a start reads its pinned version without a statement. Bounded by the documents' characters;
# a missing version is never kept (it may be published the next moment).
VERSION_CACHE_CHARS = 8 * 1024 * 1024
_versions: LRUCache[tuple[str, str, str], tuple] = LRUCache(
    maxsize=VERSION_CACHE_CHARS, getsizeof=lambda row: len(row[3])
)
_versions_lock = threading.Lock()  # cachetools' caches are not thread-safe


_DEFINITION_VERSION_LOAD = query(
    "definition_version_load",
    "SELECT v.id, v.definition_id, v.version, v.document::text AS document, v.queues, v.created_at "
    "FROM workflow_definition_versions v JOIN workflow_definitions d ON d.id = v.definition_id "
    "WHERE d.id = :d AND d.namespace_id = :ns AND v.version = :v",
)


def load_version(conn: Connection, namespace_id: str, definition_id: str, version: str) -> dict:
    if not VERSION_RE.fullmatch(version):
        raise version_not_found(conn, namespace_id, definition_id, version)
    key = (namespace_id, definition_id, version)
    with _versions_lock:
        row = _versions.get(key)
    if row is None:
        found = run(
            conn,
            _DEFINITION_VERSION_LOAD,
            {"d": definition_id, "ns": namespace_id, "v": version},
        ).first()
        if found is None:
            raise version_not_found(conn, namespace_id, definition_id, version)
        row = tuple(found)
        if len(row[3]) <= VERSION_CACHE_CHARS // 16:  # one document never evicts most of the others
            with _versions_lock:
                _versions[key] = row
    vid, def_id, ver, document, queues, created_at = row
    return {
        "id": vid,
        "definition_id": def_id,
        "version": ver,
        "document": jsonx.loads_exact_db(document),
        "queues": list(queues),
        "created_at": created_at,
    }


def get_version(conn: Connection, namespace_id: str, definition_id: str, version: str) -> dict:
    if not is_hex32(definition_id):
        raise definition_not_found(definition_id)
    v = load_version(conn, namespace_id, definition_id, version)
    return {
        "id": v["id"],
        "definition_id": v["definition_id"],
        "version": v["version"],
        "queues": v["queues"],
        "document": v["document"],
        "created_at": rfc3339(v["created_at"]),
    }


def get_contract(conn: Connection, namespace_id: str, definition_id: str, version: str) -> dict:
    v = get_version(conn, namespace_id, definition_id, version)
    doc = v["document"]
    return {
        "definition_id": definition_id,
        "definition_version_id": v["id"],
        "version": version,
        "input_schema": doc["input_schema"],
        "signals": [
            {"name": s["name"], "payload_version": s["payload_version"], "schema": s["schema"]}
            for s in doc.get("signals", [])
        ],
    }


# a page of a namespace's definitions (or the one of that name), newest first, after the cursor's position
# if any (a namespace has few definitions: the namespace's unique (namespace_id, name) index serves both)
_DEFINITIONS_PAGE = query(
    "definitions_page",
    """
SELECT id, created_at FROM workflow_definitions
WHERE namespace_id = :ns AND (CAST(:name AS text) IS NULL OR name = :name)
  AND (CAST(:c_created AS timestamptz) IS NULL OR (created_at, id) < (:c_created, :c_id))
ORDER BY created_at DESC, id DESC LIMIT :limit
""",
)
_VERSIONS_PAGE = query(
    "definition_versions_page",
    """
SELECT id, version, queues, created_at, document->>'description' AS description
FROM workflow_definition_versions
WHERE definition_id = :d
  AND (CAST(:c_created AS timestamptz) IS NULL OR (created_at, id) < (:c_created, :c_id))
ORDER BY created_at DESC, id DESC LIMIT :limit
""",
)


def _after(cursor: str | None, binding: dict[str, Any]) -> dict[str, Any]:
    """The page's position (``c_created``, ``c_id``): the cursor's, or none (the first page)."""
    if cursor is None:
        return {"c_created": None, "c_id": None}
    pos = cursors.decode(cursor, binding, c=cursors.TIME, i=cursors.TEXT)
    return {"c_created": pos["c"], "c_id": pos["i"]}


def list_definitions(
    conn: Connection, namespace_id: str, name: str | None, limit: int, cursor: str | None
) -> dict:
    """The namespace's definitions (each with its versions), newest first; ``name`` = exact name.
    ``next_cursor`` is bound to the namespace, this list and the filter."""
    if name is not None and (not NAME_RE.match(name) or name != name.strip()):
        raise InvalidArgument("1-128 characters (letters, digits, space _ . : -)", field="name")
    params: dict[str, Any] = {"ns": namespace_id, "limit": limit + 1, "name": name}
    binding = {"ns": namespace_id, "list": "definitions", "name": name}
    params.update(_after(cursor, binding))
    rows = run(conn, _DEFINITIONS_PAGE, params).all()
    out: dict[str, Any] = {"items": [get_definition(conn, namespace_id, r.id) for r in rows[:limit]]}
    if len(rows) > limit:
        last = rows[limit - 1]
        out["next_cursor"] = cursors.encode({"c": last.created_at.isoformat(), "i": last.id}, binding)
    return out


def list_versions(
    conn: Connection, namespace_id: str, definition_id: str, limit: int, cursor: str | None
) -> dict:
    """A definition's published versions (without their documents), newest first."""
    get_definition(conn, namespace_id, definition_id)  # 404 naming the id
    params: dict[str, Any] = {"d": definition_id, "limit": limit + 1}
    binding = {"ns": namespace_id, "list": "definition_versions", "definition": definition_id}
    params.update(_after(cursor, binding))
    rows = run(conn, _VERSIONS_PAGE, params).all()
    items = []
    for v in rows[:limit]:
        item = {
            "id": v.id,
            "definition_id": definition_id,
            "version": v.version,
            "queues": list(v.queues),
            "created_at": rfc3339(v.created_at),
        }
        if v.description is not None:
            item["description"] = v.description
        items.append(item)
    out: dict[str, Any] = {"items": items}
    if len(rows) > limit:
        last = rows[limit - 1]
        out["next_cursor"] = cursors.encode({"c": last.created_at.isoformat(), "i": last.id}, binding)
    return out
