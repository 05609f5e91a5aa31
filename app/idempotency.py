"""Idempotency-Key receipts (SPEC W-API-2, W-START-7).

A receipt is keyed by (scope = namespace id, route, key) under a unique index. It is inserted with
``INSERT ... ON CONFLICT DO NOTHING`` at the *start* of the business transaction and completed with
the response in the *same* transaction, so a committed change always has its receipt and a rolled
back one has none. A concurrent duplicate blocks on the unique index until the first transaction
ends (then replays it, or proceeds if the first rolled back); it waits at most ``WAIT_SECONDS``
and otherwise gets 409 IDEMPOTENCY_CONFLICT with Retry-After.

Errors are not stored: a request that failed (4xx/5xx, rolled back) can be resent with the same key.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from app import jsonx
from app.db import transaction
from app.errors import IdempotencyConflict, InvalidArgument
from app.sql import defer, run

WAIT_SECONDS = 10
RETENTION_HOURS = 24
MAX_KEY_BYTES = 128
# RFC 9110 token characters (printable ASCII, no separators or spaces).
KEY_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,128}$")


@dataclass(frozen=True)
class StoredResponse:
    status: int
    body: str  # exact JSON text
    replayed: bool

    def json(self) -> Any:
        return jsonx.loads_exact_db(self.body)  # our own stored response


def validate_key(key: str | None) -> str:
    if key is None or key == "":
        raise InvalidArgument("Idempotency-Key header is required for this request", field="Idempotency-Key")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES or not KEY_RE.fullmatch(key):
        raise InvalidArgument(
            "Idempotency-Key: 1-128 bytes of printable ASCII token characters", field="Idempotency-Key"
        )
    return key


def fingerprint(method: str, path: str, body: Any) -> str:
    """sha256 of the canonical request: method, path and the parsed body (key order ignored)."""
    canon = jsonx.dumps(_sorted(body))
    return hashlib.sha256(f"{method.upper()} {path}\n{canon}".encode()).hexdigest()


def _sorted(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _sorted(o[k]) for k in sorted(o)}
    if isinstance(o, list):
        return [_sorted(v) for v in o]
    return o


# The claim sets the transaction's lock timeout to WAIT_SECONDS in the same statement (the CTE ``o`` runs
# before the insert can wait on a duplicate's uncommitted row) and answers the timeout it replaced, which
# ``_SET_LOCK_TIMEOUT`` then gives back to the rest of the transaction; ``id`` is NULL when the key exists.
_CLAIM = text(
    """
WITH o AS MATERIALIZED (SELECT current_setting('lock_timeout') AS old, set_config('lock_timeout', :wait, true)),
ins AS (
    INSERT INTO idempotency_receipts (scope, route, key, fingerprint)
    SELECT :scope, :route, :key, :fp FROM o
    ON CONFLICT (scope, route, key) DO NOTHING
    RETURNING id
)
SELECT o.old, (SELECT id FROM ins) AS id FROM o
"""
)
_SET_LOCK_TIMEOUT = text("SELECT set_config('lock_timeout', :v, true)")
_READ = text(
    "SELECT fingerprint, status_code, response FROM idempotency_receipts "
    "WHERE scope = :scope AND route = :route AND key = :key"
)
_COMPLETE = text(
    "UPDATE idempotency_receipts SET status_code = :status, response = :body "
    "WHERE scope = :scope AND route = :route AND key = :key"
)


def claim(conn: Connection, *, scope: str, route: str, key: str, fp: str) -> StoredResponse | None:
    """Claim ``key`` inside ``conn``'s transaction. None: this request owns the key, go on and call
    ``complete``. A StoredResponse: replay it (same request). Raises IdempotencyConflict when the
    key was used with another request, or when a duplicate is still in flight after WAIT_SECONDS."""
    params = {"scope": scope, "route": route, "key": key, "fp": fp}
    # Wait at most WAIT_SECONDS for a duplicate in flight (its uncommitted receipt row), then restore
    # the transaction's lock timeout. A timeout aborts the transaction, which the caller rolls back
    # on the IdempotencyConflict: nothing else of it can have happened yet (no savepoint needed).
    try:
        claimed = run(conn, _CLAIM, {**params, "wait": f"{WAIT_SECONDS}s"}).one()
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) == "55P03":  # lock_not_available: first still in flight
            raise IdempotencyConflict(
                "a request with this Idempotency-Key is still in progress; retry later", retry_after=1
            ) from None
        raise
    defer(conn, _SET_LOCK_TIMEOUT, {"v": claimed.old})  # sent with the next statement, before it
    if claimed.id is not None:
        return None
    stored = run(conn, _READ, params).first()
    if stored is None or stored.status_code is None:  # pragma: no cover - the owner always completes
        raise IdempotencyConflict("a request with this Idempotency-Key is still in progress", retry_after=1)
    if stored.fingerprint != fp:
        raise IdempotencyConflict("this Idempotency-Key was already used with a different request")
    return StoredResponse(status=stored.status_code, body=stored.response, replayed=True)


def complete(conn: Connection, *, scope: str, route: str, key: str, status: int, body: str) -> None:
    run(conn, _COMPLETE, {"scope": scope, "route": route, "key": key, "status": status, "body": body})


def execute_once(
    *,
    scope: str,
    route: str,
    key: str,
    fp: str,
    work: Callable[[Connection], tuple[int, Any]],
    engine: Engine | None = None,
) -> StoredResponse:
    """Run ``work(conn)`` once per key in one transaction with its receipt.

    ``work`` returns ``(status, body)``; the body is serialised exactly (``jsonx.dumps``) and stored.
    A replay returns the stored status and body with ``replayed=True``."""
    with transaction(engine) as conn:
        stored = claim(conn, scope=scope, route=route, key=key, fp=fp)
        if stored is not None:
            return stored
        status, body = work(conn)
        body_text = jsonx.dumps(body)
        complete(conn, scope=scope, route=route, key=key, status=status, body=body_text)
    return StoredResponse(status=status, body=body_text, replayed=False)


def prune(conn: Connection, *, older_than_hours: int = RETENTION_HOURS, limit: int = 1000) -> int:
    """Delete up to ``limit`` receipts older than the retention window (a key may be reused after
    it); the drain calls it every run (issue 9: receipts expire and the table stays bounded)."""
    res = run(
        conn,
        "DELETE FROM idempotency_receipts WHERE id IN (SELECT id FROM idempotency_receipts "
        "WHERE created_at < now() - make_interval(hours => :h) ORDER BY created_at LIMIT :n)",
        {"h": older_than_hours, "n": limit},
    )
    return res.rowcount or 0


def prune_sweep(conn: Connection, limit: int) -> int:
    """The drain's sweep (``app.ledger.drain.Sweep`` shape)."""
    return prune(conn, limit=limit)
