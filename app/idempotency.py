"""Idempotency-Key receipts (SPEC W-API-2, W-START-7).

A receipt is keyed by (scope = namespace id, route, key) under a unique index and written ONCE, with
the response, at the end of the business transaction (one row insert per mutation, no update), so a
committed change always has its receipt and a rolled back one has none. At the *start* the
transaction takes a transaction-level advisory lock on the key and reads the receipt: a concurrent
duplicate blocks on that lock until the first transaction ends (then replays it, or proceeds if the
first rolled back); it waits at most ``WAIT_SECONDS`` and otherwise gets 409 IDEMPOTENCY_CONFLICT with
Retry-After. A long poll's empty tries (``web.mutation.NothingYet``) therefore write nothing.

Errors are not stored: a request that failed (4xx/5xx, rolled back) can be resent with the same key.

A mutation whose own rows can keep its key writes no receipt row (``execute_on_rows``): a task claim
marks the tasks it claims with its key and fingerprint (``workflow_tasks.claim_key``), and a resend
answers those tasks again. It takes the same key lock, sent with its first statement. A workflow start
keeps its key on its instance and its response on its event batch (``app.engine.start_keys``, with the
lock and its read in one statement: ``locked_read``); receipts of starts accepted before that are still
read here until they expire.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from app import jsonx
from app.db import transaction
from app.errors import IdempotencyConflict, InvalidArgument
from app.sql import Query, query, run

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


# The claim is ONE statement: the transaction's lock timeout becomes WAIT_SECONDS, the key's advisory lock
# is taken, the lock timeout it replaced is given back to the rest of the transaction, and the receipt is
# read. The read has the statement's snapshot, taken before a wait for a duplicate in flight: when that
# duplicate commits its receipt meanwhile, this request goes on as if it owned the key, and its own receipt
# then fails its commit on the unique key (``execute_once`` runs it again, which replays the first).
_KEY_LOCKED = (
    "WITH o AS MATERIALIZED (SELECT current_setting('lock_timeout') AS old, set_config('lock_timeout', :wait, true)), "
    "l AS MATERIALIZED (SELECT pg_advisory_xact_lock(hashtextextended(:lock_key, 0)) FROM o) "
    "SELECT set_config('lock_timeout', o.old, true) AS restored"
)
_CLAIM_READ = (
    ", r.fingerprint, r.status_code, r.response "
    "FROM o CROSS JOIN l LEFT JOIN idempotency_receipts r ON r.scope = :scope AND r.route = :route AND r.key = :key"
)


def key_locked_read(name: str, reads: str) -> Query:
    """The named statement of the key's lock and a read (``locked_read``): ``reads`` continues the lock's
    SELECT (``", <columns> FROM o CROSS JOIN l <joins>"``)."""
    return query(name, _KEY_LOCKED + reads)


_CLAIM = key_locked_read("idempotency_key_claim", _CLAIM_READ)
_INSERT = query(
    "idempotency_receipt_insert",
    "INSERT INTO idempotency_receipts (scope, route, key, fingerprint, status_code, response) "
    "VALUES (:scope, :route, :key, :fp, :status, :body)",
)


# The key's lock alone, for a mutation whose own rows are its receipt (``execute_on_rows``): ``_CLAIM``
# without the receipt read.
_LOCK = query("idempotency_key_lock", _KEY_LOCKED + " FROM o CROSS JOIN l")

_UNIQUE = "uq_idempotency_receipts_key"
T = TypeVar("T")


def _lock_key(scope: str, route: str, key: str) -> str:
    return f"lf-idem:{scope}\n{route}\n{key}"


def locked_read(conn: Connection, k: Key, statement: Query, params: dict[str, Any]) -> Any:
    """The key's lock and a read in ONE statement, the transaction's first: ``statement`` (made by
    ``key_locked_read``, with ``params``). Returns its row. The
    read has the statement's snapshot, taken before a wait for a duplicate in flight (see ``_CLAIM``): the
    rows that keep the key need a unique key, whose violation makes the caller run the request again.
    Raises IdempotencyConflict when a duplicate is still in flight after WAIT_SECONDS."""
    # Wait at most WAIT_SECONDS for a duplicate in flight (it holds the key's lock). A timeout aborts the
    # transaction, which the caller rolls back on the IdempotencyConflict: nothing else of it can have
    # happened yet (no savepoint needed).
    args = {**params, "wait": f"{WAIT_SECONDS}s", "lock_key": _lock_key(k.scope, k.route, k.key)}
    try:
        return run(conn, statement, args).one()
    except OperationalError as exc:
        if _in_flight(exc):  # the first is still in flight
            raise _still_in_progress() from None
        raise


def claim(conn: Connection, *, scope: str, route: str, key: str, fp: str) -> StoredResponse | None:
    """Claim ``key`` inside ``conn``'s transaction. None: this request owns the key, go on and call
    ``complete``. A StoredResponse: replay it (same request). Raises IdempotencyConflict when the
    key was used with another request, or when a duplicate is still in flight after WAIT_SECONDS."""
    k = Key(scope=scope, route=route, key=key, fp=fp)
    found = locked_read(conn, k, _CLAIM, {"scope": scope, "route": route, "key": key})
    if found.fingerprint is None:
        return None
    if found.fingerprint != fp:
        raise used_otherwise()
    return StoredResponse(status=found.status_code, body=found.response, replayed=True)


def complete(conn: Connection, *, scope: str, route: str, key: str, status: int, body: str, fp: str) -> None:
    """The receipt, in ``conn``'s transaction."""
    run(conn, _INSERT, {"scope": scope, "route": route, "key": key, "fp": fp, "status": status, "body": body})


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

    def attempt() -> StoredResponse:
        with transaction(engine) as conn:
            stored = claim(conn, scope=scope, route=route, key=key, fp=fp)
            if stored is not None:
                return stored
            status, body = work(conn)
            body_text = jsonx.dumps(body)
            complete(conn, scope=scope, route=route, key=key, status=status, body=body_text, fp=fp)
        return StoredResponse(status=status, body=body_text, replayed=False)

    return replaying_a_duplicate(attempt, _UNIQUE)


def replaying_a_duplicate(attempt: Callable[[], StoredResponse], unique: str) -> StoredResponse:
    """``attempt()``, one transaction that reads the key after its lock and keeps the key under the
    unique index ``unique``; run once more when its commit fails on that index: a duplicate committed
    the key while this one waited for the key's lock (its read had the statement's earlier snapshot,
    see ``_KEY_LOCKED``), so this one rolled back and the next attempt answers the duplicate's."""
    for n in (1, 2):
        try:
            return attempt()
        except IntegrityError as exc:
            if n == 2 or not violates(exc, unique):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def violates(exc: IntegrityError, constraint: str) -> bool:
    """Whether ``exc`` is a violation of the unique key (or constraint) named ``constraint``."""
    return getattr(getattr(exc.orig, "diag", None), "constraint_name", None) == constraint


@dataclass(frozen=True)
class Key:
    """One request's Idempotency-Key: its scope, route and key, and the request's fingerprint."""

    scope: str
    route: str
    key: str
    fp: str


def _in_flight(exc: OperationalError) -> bool:
    return getattr(exc.orig, "sqlstate", None) == "55P03"  # lock_not_available: a duplicate in flight


def used_otherwise() -> IdempotencyConflict:
    """The 409 of a key used before with another request (another fingerprint)."""
    return IdempotencyConflict("this Idempotency-Key was already used with a different request")


def _still_in_progress() -> IdempotencyConflict:
    return IdempotencyConflict(
        "a request with this Idempotency-Key is still in progress; retry later", retry_after=1
    )


def execute_on_rows(
    k: Key, work: Callable[[Connection], tuple[int, Any, bool] | None], *, engine: Engine | None = None
) -> StoredResponse | None:
    """``on_rows`` for a whole response: ``work`` returns ``(status, body, replayed)`` and the body is
    serialised exactly (``jsonx.dumps``); or None (an empty try of a long poll, which wrote nothing:
    committed, answered None)."""
    done = on_rows(k, work, engine=engine)
    if done is None:
        return None
    status, body, replayed = done
    return StoredResponse(status=status, body=jsonx.dumps(body), replayed=replayed)


def on_rows(k: Key, work: Callable[[Connection], T], *, engine: Engine | None = None) -> T:
    """Run ``work(conn)`` once per key in one transaction, for a mutation whose own rows keep the key and
    the fingerprint (a task claim: ``workflow_tasks.claim_key``), so no receipt row is written; returns
    what ``work`` returns, once committed.

    The key's lock is taken first, in a statement of its own: a duplicate in flight is
    waited for, at most ``WAIT_SECONDS`` (then IdempotencyConflict with Retry-After), and ``work``'s
    statements, each with a snapshot taken after the lock, see what the duplicate committed. ``work``
    finds the rows of a first request with this key and answers them again, or raises
    IdempotencyConflict when their fingerprint is not ``k.fp``."""
    with transaction(engine) as conn:
        done = on_rows_in(conn, k, work)
    return done


def on_rows_in(conn: Connection, k: Key, work: Callable[[Connection], T]) -> T:
    """``on_rows`` inside the caller's transaction ``conn`` (what ``work`` did commits with the caller's
    writes, or rolls back with them)."""
    try:
        run(conn, _LOCK, {"wait": f"{WAIT_SECONDS}s", "lock_key": _lock_key(k.scope, k.route, k.key)})
        return work(conn)
    except OperationalError as exc:
        if _in_flight(exc):
            raise _still_in_progress() from None
        raise


_IDEMPOTENCY_RECEIPTS_PRUNE = query(
    "idempotency_receipts_prune",
    "DELETE FROM idempotency_receipts WHERE id IN (SELECT id FROM idempotency_receipts "
    "WHERE created_at < now() - make_interval(hours => :h) ORDER BY created_at LIMIT :n)",
)


def prune(conn: Connection, *, older_than_hours: int = RETENTION_HOURS, limit: int = 1000) -> int:
    """Delete up to ``limit`` receipts older than the retention window (a key may be reused after
    it); the drain calls it every run (so receipts expire and the table stays bounded)."""
    res = run(
        conn,
        _IDEMPOTENCY_RECEIPTS_PRUNE,
        {"h": older_than_hours, "n": limit},
    )
    return res.rowcount or 0


def prune_sweep(conn: Connection, limit: int) -> int:
    """The drain's sweep (``app.ledger.drain.Sweep`` shape)."""
    return prune(conn, limit=limit)
