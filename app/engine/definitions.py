"""Workflow definitions and immutable versions (X-DEF), stored per namespace."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from app import jsonx
from app.engine.documents import VERSION_RE, validate_document
from app.errors import FieldError, InvalidArgument, NotFound, StateConflict
from app.ids import is_hex32, new_id
from app.jsonx import rfc3339

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:-]{0,127}$")


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
            conn.execute(
                text(
                    "INSERT INTO workflow_definitions (id, namespace_id, name, description) VALUES (:id, "
                    ":ns, :n, :d)"
                ),
                {"id": def_id, "ns": namespace_id, "n": name, "d": description},
            )
        except IntegrityError:
            raise StateConflict(f"a definition named {name!r} already exists in this namespace") from None
    return get_definition(conn, namespace_id, def_id)


def get_definition(conn: Connection, namespace_id: str, definition_id: str) -> dict:
    if not is_hex32(definition_id):
        raise NotFound("definition not found")
    row = conn.execute(
        text("SELECT * FROM workflow_definitions WHERE id = :id AND namespace_id = :ns"),
        {"id": definition_id, "ns": namespace_id},
    ).first()
    if row is None:
        raise NotFound("definition not found")
    versions = conn.execute(
        text(
            "SELECT id, version, queues, created_at FROM workflow_definition_versions "
            "WHERE definition_id = :id ORDER BY created_at, id"
        ),
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


def publish_version(conn: Connection, namespace_id: str, definition_id: str, document: Any) -> dict:
    """Validate the whole graph, check SUBWORKFLOW targets exist, store an immutable version."""
    conn.execute(
        text("SELECT id FROM workflow_definitions WHERE id = :id AND namespace_id = :ns FOR UPDATE"),
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
        target = conn.execute(
            text(
                "SELECT v.id FROM workflow_definition_versions v JOIN workflow_definitions d ON d.id = "
                "v.definition_id "
                "WHERE d.id = :d AND d.namespace_id = :ns AND v.version = :v"
            ),
            {"d": st["definition_id"], "ns": namespace_id, "v": st["version"]},
        ).first()
        if target is None:
            errors.append(
                FieldError(f"steps[{i}].version", "no such published definition version in this namespace")
            )
    if errors:
        raise InvalidArgument(errors=errors)
    exists = conn.execute(
        text("SELECT 1 FROM workflow_definition_versions WHERE definition_id = :d AND version = :v"),
        {"d": definition_id, "v": doc["version"]},
    ).first()
    if exists:
        raise StateConflict(f"version {doc['version']!r} is already published; versions are immutable")
    vid = new_id()
    conn.execute(
        text(
            "INSERT INTO workflow_definition_versions (id, definition_id, namespace_id, version, document, "
            "queues) "
            "VALUES (:id, :d, :ns, :v, CAST(:doc AS jsonb), CAST(:q AS text[]))"
        ),
        {
            "id": vid,
            "d": definition_id,
            "ns": namespace_id,
            "v": doc["version"],
            "doc": jsonx.dumps(doc),
            "q": queues,
        },
    )
    conn.execute(
        text("UPDATE workflow_definitions SET updated_at = now() WHERE id = :id"), {"id": definition_id}
    )
    return get_version(conn, namespace_id, definition_id, doc["version"])


def load_version(conn: Connection, namespace_id: str, definition_id: str, version: str) -> dict:
    if not VERSION_RE.fullmatch(version):
        raise NotFound("definition version not found")
    row = conn.execute(
        text(
            "SELECT v.id, v.definition_id, v.version, v.document::text AS document, v.queues, v.created_at "
            "FROM workflow_definition_versions v JOIN workflow_definitions d ON d.id = v.definition_id "
            "WHERE d.id = :d AND d.namespace_id = :ns AND v.version = :v"
        ),
        {"d": definition_id, "ns": namespace_id, "v": version},
    ).first()
    if row is None:
        raise NotFound("definition version not found")
    return {
        "id": row.id,
        "definition_id": row.definition_id,
        "version": row.version,
        "document": jsonx.loads_exact_db(row.document),
        "queues": list(row.queues),
        "created_at": row.created_at,
    }


def get_version(conn: Connection, namespace_id: str, definition_id: str, version: str) -> dict:
    if not is_hex32(definition_id):
        raise NotFound("definition not found")
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
