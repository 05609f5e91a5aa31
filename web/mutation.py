"""Idempotent mutations (SPEC W-API-2): ``@mutation`` declares the required ``Idempotency-Key`` header;
``idempotent(work)`` — the idempotency wrapper of every route but two — runs ``work(conn)`` once per
(namespace, method + path, Idempotency-Key) in one transaction with the receipt, and replays the
stored response. Audit rows written by ``work`` share that transaction. A task claim
(``idempotent_on_rows``) and a workflow start (``idempotent_start``) keep the key on their own rows
instead of a receipt row."""

from __future__ import annotations

import enum
import functools
import time
from collections.abc import Callable
from typing import Any

from flask import Response, request
from sqlalchemy import Connection

from app import idempotency, jsonx
from app.engine import start_keys
from web.auth import current_principal
from web.http import json_response, raw_json_response, request_id
from web.meta import meta
from web.strict import read_json_body

REPLAYED_HEADER = "Idempotent-Replayed"


class Replay(enum.Enum):
    """How a replay of the stored response answers.

    STORED: the stored status and body byte for byte (the job ledger API, L-API).
    RECEIPT: the stored body with this request's id and ``deduplicated: true``; a stored 201 answers
    200 (the workflow API, W-API-3)."""

    STORED = "stored"
    RECEIPT = "receipt"


class NothingYet(Exception):
    """Raised by ``work`` to roll its transaction back (no receipt kept) and try again later."""


def mutation(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Require a valid ``Idempotency-Key`` header (checked after authentication, before the body)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        idempotency.validate_key(request.headers.get("Idempotency-Key"))
        return fn(*args, **kwargs)

    meta(wrapper)["idempotency_key"] = True
    return wrapper


def idempotent(
    work: Callable[[Connection], tuple[int, Any]],
    *,
    replay: Replay = Replay.RECEIPT,
    wait_until: float | None = None,
    wait: Callable[[float], None] | None = None,
    per_credential: bool = False,
) -> Response:
    """Execute ``work`` once; same key + same body → the stored response (``Idempotent-Replayed:
    true``, see ``Replay``); same key + other body → 409 IDEMPOTENCY_CONFLICT.

    ``per_credential``: the key belongs to the calling credential, not to its namespace. For answers
    that carry a secret shown once (a webhook signing secret): the stored response is replayed to the
    credential that made the request only, never to another credential of the namespace;
    another credential's request with the same key is its own request.

    With ``wait_until`` (a ``time.monotonic()`` deadline) ``work`` may raise ``NothingYet``: each try
    is one short transaction, retried after ``wait(seconds_left)`` returns (a long poll: see
    ``web.long_poll``; without ``wait`` it sleeps 1 s between tries)."""
    k = _request_key(per_credential)

    def once() -> idempotency.StoredResponse:
        return idempotency.execute_once(scope=k.scope, route=k.route, key=k.key, fp=k.fp, work=work)

    return _answer(_until_something(once, wait_until, wait), replay)


def idempotent_start(work: Callable[[Connection, idempotency.Key], tuple[str, Any]]) -> Response:
    """``idempotent`` for a workflow start, whose own rows keep its Idempotency-Key: the instance the key
    and the fingerprint, its event batch the response (``app.engine.start_keys``), so neither a receipt
    row is written. ``work(conn, key)`` starts the instance with ``start_key=(key.key, key.fp)`` and
    returns ``(instance id, body)``; the answer is 201 and a replay answers as ``Replay.RECEIPT``."""
    k = _request_key(False)
    return _answer(start_keys.execute_start(k, work), Replay.RECEIPT)


def _answer(stored: idempotency.StoredResponse, replay: Replay) -> Response:
    """The response of a first request, or of a replay as ``replay`` says."""
    if not stored.replayed:
        return raw_json_response(stored.body, stored.status)
    headers = {REPLAYED_HEADER: "true"}
    if replay is Replay.STORED:
        return raw_json_response(stored.body, stored.status, headers)
    body = jsonx.loads_exact_db(stored.body)  # our own stored response, not tenant input
    body["request_id"] = request_id()
    if isinstance(body.get("data"), dict) and "deduplicated" in body["data"]:
        body["data"]["deduplicated"] = True
    return json_response(body, 200 if stored.status == 201 else stored.status, headers)


def idempotent_on_rows(
    work: Callable[[Connection, idempotency.Key], tuple[int, Any, bool] | None],
    *,
    wait_until: float | None = None,
    wait: Callable[[float], None] | None = None,
) -> Response:
    """``idempotent`` for a mutation whose own rows keep its Idempotency-Key (a task claim: the tasks it
    claimed carry the key and the fingerprint), so no receipt row is written
    (``app.idempotency.execute_on_rows``). ``work(conn, key)`` returns ``(status, body, replayed)``: a
    replay answers the rows the key marks again, with this request's id and ``Idempotent-Replayed:
    true``; same key + other body -> 409 IDEMPOTENCY_CONFLICT. ``wait_until`` / ``wait`` as in
    ``idempotent``; ``work`` answers None for an empty try, one that wrote nothing: its transaction
    commits (a rollback would also drop every statement its connection had prepared: psycopg deallocates
    them all at a ROLLBACK) and the try is repeated as after ``NothingYet``."""
    k = _request_key(False)

    def once() -> idempotency.StoredResponse:
        stored = idempotency.execute_on_rows(k, lambda conn: work(conn, k))
        if stored is None:
            raise NothingYet
        return stored

    stored = _until_something(once, wait_until, wait)
    headers = {REPLAYED_HEADER: "true"} if stored.replayed else None
    return raw_json_response(stored.body, stored.status, headers)


def _request_key(per_credential: bool) -> idempotency.Key:
    """This request's Idempotency-Key: scope (the namespace, or the credential with ``per_credential``),
    route (method + path) and the fingerprint of the request."""
    principal = current_principal()
    # one scope per resource: ``/v1/workflows`` and ``/v1/workflows/`` are the same route (a trailing
    # slash must not let one key start two instances)
    path = request.path.rstrip("/") or "/"
    # a route without a body (DELETE) may be called without one: no Content-Type needed then
    sent = bool(request.content_length) or request.headers.get("Transfer-Encoding") == "chunked"
    scope = (
        f"{principal.namespace_id}/{principal.credential_id}" if per_credential else principal.namespace_id
    )
    return _key(scope, request.method, path, read_json_body() if sent or request.mimetype else None)


def _key(scope: str, method: str, path: str, body: Any) -> idempotency.Key:
    """This request's Idempotency-Key in ``scope`` for ``method`` ``path`` with ``body``."""
    key = idempotency.validate_key(request.headers.get("Idempotency-Key"))
    fp = idempotency.fingerprint(method, path, body)
    return idempotency.Key(scope=scope, route=f"{method} {path}", key=key, fp=fp)


def request_key_as(path: str, body: Any) -> idempotency.Key:
    """The Idempotency-Key of this request as a POST of ``body`` to ``path`` would have it: one part of a
    request that does what another route does (the ``claim`` of ``POST /v1/tasks/complete`` is a claim
    with the request's key), so that a resend of either meets the other's rows."""
    return _key(current_principal().namespace_id, "POST", path, body)


def _until_something(
    once: Callable[[], idempotency.StoredResponse],
    wait_until: float | None,
    wait: Callable[[float], None] | None,
) -> idempotency.StoredResponse:
    """``once()``, tried again while it raises ``NothingYet`` until ``wait_until`` (see ``idempotent``)."""
    while True:
        try:
            return once()
        except NothingYet:
            if wait_until is None:
                raise
            left = max(0.0, wait_until - time.monotonic())
            if wait is not None:
                wait(left)
            else:
                time.sleep(min(1.0, left))
