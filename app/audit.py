"""Operation audit (SPEC W-AUDIT, L-API-1): one row per mutation, written in the same transaction
as the change, read newest first with an opaque cursor bound to the query. A workflow start's entry and
the engine's are written with the workflow's event batch instead (``app.engine.oplog``); reads list
them all."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from app import auth, jsonx
from app import cursor as cursors
from app.auth import IssuedCredential, Principal
from app.ids import new_id
from app.observability.logs import redact_url_fields
from app.sql import run

_INSERT = text(
    """
INSERT INTO operation_audit (id, namespace_id, actor_id, actor_name, action, target_type, target_id,
    workflow_id, operation_id, reason, evidence_ref, request_id, before, after)
VALUES (:id, :ns, :actor, :actor_name, :action, :target_type, :target_id, :workflow_id, :operation_id,
    :reason, :evidence_ref, :request_id, CAST(:before AS jsonb), CAST(:after AS jsonb))
RETURNING created_at
"""
)

COLUMNS = """id, namespace_id, actor_id, actor_name, action, target_type, target_id, workflow_id,
    operation_id, reason, evidence_ref, request_id, before::text AS before, after::text AS after,
    created_at"""
# Reads go through the view ``workflow_operations``: these rows and the audit entries written with the
# workflow's event batches, the engine's advances (``app.engine.events.audit_advance``) and the
# ``workflow.start`` of a start with its actor (``events.audit_by``: a start writes no row here); an
# entry's id names its batch (its first 29 hex digits and ``000``), which a read by id looks up.
_READ_FROM = "workflow_operations"


def record(
    conn: Connection,
    *,
    principal: Principal,
    request_id: str | None,
    action: str,
    target_type: str,
    target_id: str,
    reason: str | None = None,
    evidence_ref: str | None = None,
    workflow_id: str | None = None,
    operation_id: str | None = None,
    before: Any = None,
    after: Any = None,
    namespace_id: str | None = None,
) -> str:
    """Insert one audit row in ``conn``'s transaction; returns its id. ``namespace_id``: the audit the
    row belongs to (default: the principal's; an operator acting on another namespace's job writes a
    second row there)."""
    audit_id = new_id()
    run(
        conn,
        _INSERT,
        {
            "id": audit_id,
            "ns": namespace_id or principal.namespace_id,
            "actor": principal.actor_id,
            "actor_name": principal.name,
            "action": action,
            "target_type": target_type,
            "target_id": str(target_id),
            "workflow_id": workflow_id,
            "operation_id": operation_id,
            "reason": reason,
            "evidence_ref": evidence_ref,
            "request_id": request_id,
            # a URL shows no user info or query values in the audit either
            "before": None if before is None else jsonx.dumps(redact_url_fields(before)),
            "after": None if after is None else jsonx.dumps(redact_url_fields(after)),
        },
    )
    return audit_id


def _system(namespace_id: str, actor_name: str) -> Principal:
    """The actor of an administrative change made outside the API (the ``ledgerflow`` CLI)."""
    return Principal(
        credential_id="cli",
        name=actor_name,
        namespace_id=namespace_id,
        namespace="",
        scopes=frozenset(),
        queues=None,
    )


def issue_credential(conn: Connection, *, actor_name: str, **kwargs: Any) -> IssuedCredential:
    """``auth.create_credential`` plus its audit row (``credential.issue``) in the credential's
    namespace; the row never holds the token, only its id, name, scopes and expiry."""
    issued = auth.create_credential(conn, **kwargs)
    after = {
        "name": issued.name,
        "scopes": list(issued.scopes),
        "queues": None if issued.queues is None else list(issued.queues),
        "platform": issued.platform,
        "expires_at": None if issued.expires_at is None else jsonx.rfc3339(issued.expires_at),
    }
    record(
        conn,
        principal=_system(issued.namespace_id, actor_name),
        request_id=None,
        action="credential.issue",
        target_type="credential",
        target_id=issued.credential_id,
        after=after,
    )
    return issued


def revoke_credential(conn: Connection, credential_id: str, *, actor_name: str) -> dict[str, Any]:
    """``auth.revoke_credential`` plus its audit row (``credential.revoke``)."""
    row = auth.revoke_credential(conn, credential_id)
    record(
        conn,
        principal=_system(row["namespace_id"], actor_name),
        request_id=None,
        action="credential.revoke",
        target_type="credential",
        target_id=credential_id,
        after={"name": row["name"], "revoked_at": jsonx.rfc3339(row["revoked_at"])},
    )
    return row


def _row(r: Any) -> dict[str, Any]:
    d = dict(r._mapping)
    d["before"] = jsonx.loads_exact_db(d["before"])
    d["after"] = jsonx.loads_exact_db(d["after"])
    return d


def get(conn: Connection, namespace_id: str, audit_id: str) -> dict[str, Any] | None:
    r = run(
        conn,
        f"SELECT {COLUMNS} FROM {_READ_FROM} WHERE namespace_id = :ns AND id = :id "
        "AND (batch_id IS NULL OR batch_id = :batch)",
        {"ns": namespace_id, "id": audit_id, "batch": audit_id[:29] + "000"},
    ).first()
    return _row(r) if r else None


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None


def list_entries(
    conn: Connection,
    namespace_id: str,
    *,
    workflow_id: str | None = None,
    target_type: str | None = None,
    target_id: str | None = None,
    action: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
    kind: str = "audit",
    exclude_target_type: str | None = None,
) -> Page:
    """Newest first (created_at, id descending). The cursor is bound to namespace + filters + kind,
    so a cursor of one resource or query cannot be replayed against another (400 INVALID_ARGUMENT)."""
    binding = {
        "ns": namespace_id,
        "wf": workflow_id,
        "tt": target_type,
        "ti": target_id,
        "a": action,
        "k": kind,
    }
    if exclude_target_type is not None:
        binding["xt"] = exclude_target_type
    after: tuple[datetime, str] | None = None
    if cursor:
        pos = cursors.decode(cursor, binding, t=cursors.TIME, i=cursors.TEXT)
        after = (pos["t"], pos["i"])
    rows = run(
        conn,
        f"""
SELECT {COLUMNS} FROM {_READ_FROM}
WHERE namespace_id = :ns
  AND (CAST(:wf AS text) IS NULL OR workflow_id = :wf)
  AND (CAST(:tt AS text) IS NULL OR target_type = :tt)
  AND (CAST(:ti AS text) IS NULL OR target_id = :ti)
  AND (CAST(:a AS text) IS NULL OR action = :a)
  AND (CAST(:xt AS text) IS NULL OR target_type <> :xt)
  AND (CAST(:at AS timestamptz) IS NULL OR (created_at, id) < (CAST(:at AS timestamptz), :aid))
ORDER BY created_at DESC, id DESC
LIMIT :lim
""",
        {
            "ns": namespace_id,
            "wf": workflow_id,
            "tt": target_type,
            "ti": target_id,
            "a": action,
            "xt": exclude_target_type,
            "at": after[0] if after else None,
            "aid": after[1] if after else None,
            "lim": limit + 1,
        },
    ).all()
    items = [_row(r) for r in rows[:limit]]
    nxt = None
    if len(rows) > limit:
        last = items[-1]
        nxt = cursors.encode({"t": jsonx.rfc3339(last["created_at"]), "i": last["id"]}, binding)
    return Page(items=items, next_cursor=nxt)
