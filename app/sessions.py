"""Console sessions kept on the server: logging out ends the session for every copy of its
cookie, not only in the browser that pressed the button.

The signed cookie holds a random session id; the table ``console_sessions`` holds only its SHA-256
(a copy of the table gives no live cookie), the credential it authenticates and when it expires. Each
console request reads the session and its credential in one statement (``session_principal``): an
ended, expired or unknown session, or a revoked or expired credential, is no principal.

Rows are bounded: a login ends the credential's oldest sessions past ``MAX_PER_CREDENTIAL`` and
deletes a bounded batch of expired rows of any credential."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import Connection

from app.auth import LIVE_CREDENTIAL, PRINCIPAL_COLUMNS, Principal, principal_of
from app.sql import query, run

SESSION_SECONDS = 8 * 3600
MAX_PER_CREDENTIAL = 50  # live sessions of one credential (a login past it ends the oldest)
PURGE_BATCH = 200  # expired rows deleted by one login
MAX_SID_CHARS = 128


def _hash(sid: str) -> str:
    return hashlib.sha256(sid.encode("utf-8")).hexdigest()


_SESSION_INSERT = query(
    "session_insert",
    "INSERT INTO console_sessions (id, credential_id, expires_at) "
    "VALUES (:id, :cred, now() + make_interval(secs => :secs))",
)


_SESSIONS_PRUNE_CREDENTIAL = query(
    "sessions_prune_credential",
    "DELETE FROM console_sessions WHERE id IN (SELECT id FROM console_sessions WHERE credential_id = :cred "
    "ORDER BY created_at DESC, id OFFSET :keep)",
)


_SESSIONS_PRUNE_EXPIRED = query(
    "sessions_prune_expired",
    "DELETE FROM console_sessions WHERE id IN (SELECT id FROM console_sessions WHERE expires_at <= now() "
    "LIMIT :n)",
)


def start_session(conn: Connection, principal: Principal, *, seconds: int = SESSION_SECONDS) -> str:
    """A new session of ``principal``'s credential; returns the session id for the cookie (shown once)."""
    sid = secrets.token_urlsafe(32)
    run(
        conn,
        _SESSION_INSERT,
        {"id": _hash(sid), "cred": principal.credential_id, "secs": seconds},
    )
    run(
        conn,
        _SESSIONS_PRUNE_CREDENTIAL,
        {"cred": principal.credential_id, "keep": MAX_PER_CREDENTIAL},
    )
    run(
        conn,
        _SESSIONS_PRUNE_EXPIRED,
        {"n": PURGE_BATCH},
    )
    return sid


_READ = query(
    "session_read",
    f"""
SELECT {PRINCIPAL_COLUMNS}
FROM console_sessions s JOIN credentials c ON c.id = s.credential_id JOIN namespaces n ON n.id = c.namespace_id
WHERE s.id = :id AND s.expires_at > now() AND {LIVE_CREDENTIAL}
""",
)


def session_principal(conn: Connection, sid: object) -> Principal | None:
    """The principal of a live session id, or None (unknown, ended or expired session; revoked or
    expired credential)."""
    if not isinstance(sid, str) or not 0 < len(sid) <= MAX_SID_CHARS:
        return None
    return principal_of(run(conn, _READ, {"id": _hash(sid)}).first())


_SESSION_DELETE = query(
    "session_delete",
    "DELETE FROM console_sessions WHERE id = :id",
)


def end_session(conn: Connection, sid: object) -> bool:
    """End a session (logout); True when it was live. Idempotent."""
    if not isinstance(sid, str) or not 0 < len(sid) <= MAX_SID_CHARS:
        return False
    return run(conn, _SESSION_DELETE, {"id": _hash(sid)}).rowcount > 0
