"""Operation audit (SPEC W-AUDIT, L-API-1): one row per mutation, written in the same transaction
as the change, read newest first with an opaque cursor bound to the query. A workflow start's entry and
the engine's are written with the workflow's event batch instead (``app.engine.audit_entries``); reads list
them all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app import auth, jsonx
from app import cursor as cursors
from app.auth import IssuedCredential, Principal
from app.errors import NotFound, PermissionDenied, Unauthenticated
from app.ids import new_id
from app.observability.logs import redact_url_fields
from app.sql import query, run

_INSERT = query(
    "audit_insert",
    """
INSERT INTO operation_audit (id, namespace_id, actor_id, actor_name, action, target_type, target_id,
    workflow_id, operation_id, reason, evidence_ref, request_id, before, after)
VALUES (:id, :ns, :actor, :actor_name, :action, :target_type, :target_id, :workflow_id, :operation_id,
    :reason, :evidence_ref, :request_id, CAST(:before AS jsonb), CAST(:after AS jsonb))
RETURNING created_at
""",
)

COLUMNS = """id, namespace_id, actor_id, actor_name, action, target_type, target_id, workflow_id,
    operation_id, reason, evidence_ref, request_id, before::text AS before, after::text AS after,
    created_at"""
# Reads go through the view ``workflow_operations``: these rows and the audit entries written with the
# workflow's event batches, the engine's advances (``app.engine.events.audit_engine``) and the
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


def _issued_after(issued: IssuedCredential) -> dict[str, Any]:
    """What a ``credential.issue`` audit row keeps: never the token, only its id, name, scopes and expiry."""
    return {
        "name": issued.name,
        "scopes": list(issued.scopes),
        "queues": None if issued.queues is None else list(issued.queues),
        "platform": issued.platform,
        "expires_at": None if issued.expires_at is None else jsonx.rfc3339(issued.expires_at),
    }


def issue_credential(conn: Connection, *, actor_name: str, **kwargs: Any) -> IssuedCredential:
    """``auth.create_credential`` plus its audit row (``credential.issue``) in the credential's
    namespace; the row never holds the token, only its id, name, scopes and expiry."""
    issued = auth.create_credential(conn, **kwargs)
    record(
        conn,
        principal=_system(issued.namespace_id, actor_name),
        request_id=None,
        action="credential.issue",
        target_type="credential",
        target_id=issued.credential_id,
        after=_issued_after(issued),
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


_ISSUER = query(
    "credential_issuer_read",
    "SELECT EXTRACT(EPOCH FROM c.expires_at - now()) AS left_seconds FROM credentials c "
    f"WHERE c.id = :id AND {auth.LIVE_CREDENTIAL} FOR SHARE",
)


def issue_credential_as(
    conn: Connection,
    issuer: Principal,
    *,
    request_id: str | None,
    name: str,
    scopes: Sequence[str],
    queues: Sequence[str] | None = None,
    platform: bool = False,
    expires_in_seconds: int | None = None,
    namespace: str | None = None,
) -> IssuedCredential:
    """Issue a credential through the API on behalf of ``issuer`` (``credentials:manage``): never with more
    than the issuer holds (``auth.delegation_problem``: scopes, platform reach, queues, namespace), never
    outliving the issuer (an issuer that expires gives its expiry at most); one ``credential.issue`` audit
    row whose actor is the issuer."""
    problem = auth.delegation_problem(issuer, scopes, queues, platform=platform, namespace=namespace)
    if problem is not None:
        raise PermissionDenied(problem)
    row = run(conn, _ISSUER, {"id": issuer.credential_id}).first()
    if row is None:
        raise Unauthenticated("the issuing credential was revoked or has expired")
    if row.left_seconds is not None:
        left = max(int(row.left_seconds), 1)
        if expires_in_seconds is None:
            expires_in_seconds = left
        elif expires_in_seconds > left:
            raise PermissionDenied(
                f"the issuing credential expires in {left} s: a credential it issues cannot outlive it"
            )
    issued = auth.create_credential(
        conn,
        namespace=issuer.namespace,
        name=name,
        scopes=scopes,
        queues=queues,
        platform=platform,
        expires_in_seconds=expires_in_seconds,
    )
    record(
        conn,
        principal=issuer,
        request_id=request_id,
        action="credential.issue",
        target_type="credential",
        target_id=issued.credential_id,
        after=_issued_after(issued),
    )
    return issued


_IN_NAMESPACE = query(
    "credential_in_namespace",
    "SELECT name, scopes, queues, platform FROM credentials WHERE id = :id AND namespace_id = :ns",
)
_PAGE = query(
    "audit_credentials_page",
    """
SELECT c.id, c.name, c.token_prefix, c.scopes, c.queues, c.platform, c.created_at, c.expires_at, c.revoked_at
FROM credentials c
WHERE c.namespace_id = :ns AND (CAST(:id AS text) IS NULL OR c.id = :id)
  AND (CAST(:c_created AS timestamptz) IS NULL OR (c.created_at, c.id) > (:c_created, :c_id))
ORDER BY c.created_at, c.id
LIMIT :limit
""",
)


def credentials_page(
    conn: Connection, issuer: Principal, limit: int, cursor: str | None, *, credential_id: str | None = None
) -> dict[str, Any]:
    """One page of ``issuer``'s namespace's credentials (or the one ``credential_id``), oldest first
    (never a token or its hash: the token's first characters identify it); ``next_cursor`` is bound to
    the namespace."""
    binding = {"ns": issuer.namespace_id, "list": "credentials"}
    params: dict[str, Any] = {
        "ns": issuer.namespace_id,
        "id": credential_id,
        "limit": limit + 1,
        "c_created": None,
        "c_id": None,
    }
    if cursor is not None:
        pos = cursors.decode(cursor, binding, c=cursors.TIME, i=cursors.TEXT)
        params.update(c_created=pos["c"], c_id=pos["i"])
    rows = run(conn, _PAGE, params).all()
    items = [
        {
            "id": r.id,
            "name": r.name,
            "namespace": issuer.namespace,
            "token_prefix": r.token_prefix,
            "scopes": list(r.scopes),
            "queues": None if r.queues is None else list(r.queues),
            "platform": r.platform,
            "created_at": jsonx.rfc3339(r.created_at),
            "expires_at": None if r.expires_at is None else jsonx.rfc3339(r.expires_at),
            "revoked_at": None if r.revoked_at is None else jsonx.rfc3339(r.revoked_at),
        }
        for r in rows[:limit]
    ]
    out: dict[str, Any] = {"items": items}
    if len(rows) > limit:
        last = rows[limit - 1]
        out["next_cursor"] = cursors.encode({"c": last.created_at.isoformat(), "i": last.id}, binding)
    return out


def revoke_credential_as(
    conn: Connection,
    issuer: Principal,
    credential_id: str,
    *,
    request_id: str | None,
    reason: str | None = None,
) -> dict[str, Any]:
    """Revoke a credential of ``issuer``'s namespace through the API: only one that holds no more than the
    issuer (a lesser credential never locks out a greater one); another namespace's is not found. One
    ``credential.revoke`` audit row whose actor is the issuer; revoking again changes nothing."""
    target = run(conn, _IN_NAMESPACE, {"id": credential_id, "ns": issuer.namespace_id}).first()
    if target is None:
        raise NotFound(f"no credential {credential_id} in namespace {issuer.namespace}")
    problem = auth.delegation_problem(issuer, target.scopes, target.queues, platform=target.platform)
    if problem is not None:
        raise PermissionDenied(f"cannot revoke {target.name}: {problem}")
    row = auth.revoke_credential(conn, credential_id)
    record(
        conn,
        principal=issuer,
        request_id=request_id,
        reason=reason,
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


_AUDIT_ENTRY_READ = query(
    "audit_entry_read",
    f"SELECT {COLUMNS} FROM {_READ_FROM} WHERE namespace_id = :ns AND id = :id "
    "AND (batch_id IS NULL OR batch_id = :batch)",
)


def get(conn: Connection, namespace_id: str, audit_id: str) -> dict[str, Any] | None:
    r = run(
        conn,
        _AUDIT_ENTRY_READ,
        {"ns": namespace_id, "id": audit_id, "batch": audit_id[:29] + "000"},
    ).first()
    return _row(r) if r else None


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None


_AUDIT_ENTRIES_PAGE = query(
    "audit_entries_page",
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
)


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
        _AUDIT_ENTRIES_PAGE,
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
