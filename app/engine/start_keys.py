"""The Idempotency-Key of a workflow start, kept on the start's own rows (W-START-7, W-START-8, issue 27).

A ``POST /v1/workflows`` writes no ``idempotency_receipts`` row: the instance's INSERT carries the key
and the request's fingerprint (``workflow_instances.start_key`` / ``start_fingerprint``, unique per
namespace among the instances that carry one) and the batch the start writes for its instance carries
the exact response body (``workflow_event_batches.start_response``; a long input is kept once, on the
instance: ``commit_batch.stored_response``). A resent start with the same key
and the same request answers that body again, the first-acceptance snapshot, whatever the instance did
since (and before any limit or quota check: a full namespace still answers it); another request with the
key gets 409 IDEMPOTENCY_CONFLICT.

Concurrency is ``app.idempotency``'s: the transaction's first statement takes the key's advisory lock
(waiting at most ``WAIT_SECONDS`` for a duplicate in flight, else 409 "still in progress") and reads the
key's instance in the same statement. A duplicate that committed while this one waited is not in that
statement's snapshot: this start goes on, its instance INSERT fails on ``uq_workflow_instances_start_key``
and the start is run again, which answers the duplicate's instance.

A key is kept ``RETENTION_HOURS`` as a receipt row was: a start whose key names an instance created
before that starts a new instance and takes the key over (the old instance's key is cleared in the same
transaction: the rare path's one extra write). Starts accepted before migration 0021 have their receipt
in ``idempotency_receipts``: it is still read (the same statement) and replayed until it expires.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine

from app import jsonx
from app.db import transaction
from app.engine import commit_batch, events
from app.errors import IdempotencyConflict
from app.idempotency import (
    RETENTION_HOURS,
    Key,
    StoredResponse,
    key_locked_read,
    locked_read,
    replaying_a_duplicate,
    used_otherwise,
)
from app.sql import query, run

STARTED = 201  # the status of every accepted start (an error is not kept: it may be resent)
_UNIQUE = "uq_workflow_instances_start_key"

# The key's instance (a start of the last RETENTION_HOURS owns the key: ``live``), the response its start
# answered (with its input on the instance: ``commit_batch.stored_response``), and a receipt row of a start
# accepted before migration 0021.
_READ_COLUMNS = """, i.id AS instance_id, i.start_fingerprint,
    i.created_at >= now() - make_interval(hours => :hours) AS live,
    (SELECT x.start_response FROM workflow_event_batches x
     WHERE x.namespace_id = i.namespace_id AND x.instance_id = i.id AND x.start_response IS NOT NULL
     LIMIT 1) AS response, i.input::text AS instance_input,
    r.fingerprint AS receipt_fingerprint, r.status_code AS receipt_status, r.response AS receipt_response
FROM o CROSS JOIN l
LEFT JOIN workflow_instances i ON i.namespace_id = :scope AND i.start_key = :key
LEFT JOIN idempotency_receipts r ON r.scope = :scope AND r.route = :route AND r.key = :key"""

_READ = key_locked_read("start_key_read", _READ_COLUMNS)

# An expired key is taken over: the instance that held it keeps no key.
_FREE = query(
    "start_key_free",
    "UPDATE workflow_instances SET start_key = NULL, start_fingerprint = NULL WHERE id = :id AND start_key = :key",
)


def _answer(found: Any, fp: str) -> StoredResponse | None:
    """The stored answer of the key read by ``_READ`` (None: this request owns the key)."""
    if found.instance_id is not None and found.live:
        if found.start_fingerprint != fp:
            raise used_otherwise()
        if found.response is None:  # kept as long as the key (app.engine.retention): never expected
            raise IdempotencyConflict(
                "this Idempotency-Key started a workflow whose response is no longer kept"
            )
        body = commit_batch.full_response(found.response, found.instance_input)
        return StoredResponse(status=STARTED, body=body, replayed=True)
    if found.receipt_fingerprint is not None:
        if found.receipt_fingerprint != fp:
            raise used_otherwise()
        return StoredResponse(status=found.receipt_status, body=found.receipt_response, replayed=True)
    return None


def execute_start(
    k: Key, work: Callable[[Connection, Key], tuple[str, Any]], *, engine: Engine | None = None
) -> StoredResponse:
    """Run the start ``work(conn, k)`` once per key in one transaction. ``work`` inserts the instance
    with ``k.key`` and ``k.fp`` (``instances.start_workflow(start_key=...)``) and returns ``(instance id,
    response body)``; the body is serialised exactly (``jsonx.dumps``) and kept on the instance's batch.
    A resent start returns that body with ``replayed=True``; another request with the key raises
    IdempotencyConflict (so does a duplicate still in flight after ``WAIT_SECONDS``)."""
    params = {"scope": k.scope, "route": k.route, "key": k.key, "hours": RETENTION_HOURS}

    def attempt() -> StoredResponse:
        with transaction(engine) as conn:
            found = locked_read(conn, k, _READ, params)
            stored = _answer(found, k.fp)
            if stored is not None:
                return stored
            if found.instance_id is not None:  # the key expired: this start takes it over
                run(conn, _FREE, {"id": found.instance_id, "key": k.key})
            instance_id, body = work(conn, k)
            body_text = jsonx.dumps(body)
            events.start_response(conn, instance_id, body_text)
        return StoredResponse(status=STARTED, body=body_text, replayed=False)

    # a duplicate that committed its instance while this one waited for the key (see _READ): answered
    return replaying_a_duplicate(attempt, _UNIQUE)
