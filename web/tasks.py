"""The task protocol for task workers (X-TASK): claim (long-poll), heartbeat, complete, fail, release,
read, and the completion of up to 16 tasks in one request."""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from flask import Blueprint, request
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

import web.long_poll as long_poll
from app import idempotency, settings
from app.auth import Scope
from app.db import get_engine, transaction
from app.engine import task_protocol, traces
from app.engine.operator_commands import check_queue_scope
from app.errors import LedgerflowError, StateConflict
from app.idempotency import Key
from schemas.tasks import (
    ClaimRequest,
    ClaimResponse,
    CompleteManyRequest,
    CompleteManyResponse,
    CompleteRequest,
    EpochRequest,
    FailRequest,
    TaskResponse,
    TaskResultResponse,
)
from web.auth import current_principal, requires
from web.engine_common import task_in_scope
from web.http import ok, success
from web.meta import doc
from web.mutation import (
    REPLAYED_HEADER,
    idempotent,
    idempotent_on_rows,
    mutation,
    request_key_as,
)
from web.strict import body

bp = Blueprint("tasks", __name__)


@bp.post("/v1/tasks/claim")
@doc(
    summary="Claim tasks from queues (long-poll up to 30 s)",
    description=(
        "Each claimed task's `epoch` is incremented. The claimed tasks keep the request's Idempotency-Key "
        "(no receipt is stored): resent with the same key and body, the claim claims nothing and answers "
        "the same tasks at the same epochs (`Idempotent-Replayed: true`; `lease_expires_at` as the lease "
        "now stands, absent once that claim ended); the same key with another body is 409 "
        "IDEMPOTENCY_CONFLICT. An empty answer keeps nothing: the same key may claim again."
    ),
    response=ClaimResponse,
    tags=["tasks"],
    errors=(400, 401, 403, 404, 409),
)
@requires(Scope.TASKS_WORK)
@mutation
@body(ClaimRequest)
def claim(body: dict):
    principal = current_principal()
    queues = sorted(set(body["queues"]))
    check_queue_scope(principal, queues)
    deadline = time.monotonic() + body["wait_seconds"]

    def work(conn, key):
        # a process that is stopping answers at once: ``{"tasks": []}`` means "poll again" to a worker
        final = time.monotonic() >= deadline or long_poll.shutting_down()
        got, replayed = _claim_keyed(conn, queues, body["max_tasks"], key, body.get("worker"))
        if not got and not final:
            return None  # an empty try: it wrote nothing, its transaction commits, and the poll goes on
        return 200, success({"tasks": got}), replayed

    if body["wait_seconds"] <= 0:  # one try: no long-poll slot, no wake-ups
        return idempotent_on_rows(work)
    with long_poll.waiting_claim(principal, queues, settings.CLAIM_POLL_SECONDS.get()) as wait:
        return idempotent_on_rows(work, wait_until=deadline, wait=wait)


def _claim_keyed(
    conn, queues: list[str], max_tasks: int, key: Key, worker: dict | None = None
) -> tuple[list[dict], bool]:
    """Claim up to ``max_tasks`` of the caller's ``queues`` (the claimed tasks keep the key: they are the
    claim's receipt, a resend answers them again): ``(claimed tasks as answered, replayed)``. ``worker``:
    the claiming worker's identity, kept on the claimed attempts (``traces``)."""
    got, replayed = task_protocol.claim_keyed(
        conn,
        current_principal().namespace_id,
        queues,
        max_tasks,
        settings.TASK_LEASE_SECONDS.get(),
        key.key,
        key.fp,
        worker,
    )
    return [_claimed(t) for t in got], replayed


def _claimed(t: dict) -> dict:
    """A claimed task as the claim answers it (a resent claim: as it now is at that claim's epoch; a claim
    already ended, by a result or by its lease, shows no ``lease_expires_at``)."""
    view = task_protocol.task_view(t)
    return {
        "id": t["id"],
        "queue": t["queue"],
        "input": view.get("input"),
        "epoch": t["epoch"],
        **({"lease_expires_at": view["lease_expires_at"]} if "lease_expires_at" in view else {}),
        "workflow_id": t["instance_id"],
        "step_key": t["step_key"],
        "attempt": t["attempt"],
        "deadline_at": view["deadline_at"],
        **({"poll_round": t["poll_round"]} if t["poll_round"] is not None else {}),
    }


@bp.post("/v1/tasks/<task_id>/heartbeat")
@doc(
    summary="Extend the lease of a claimed task",
    tags=["tasks"],
    errors=(400, 401, 403, 404, 409),
    response=TaskResultResponse,
)
@requires(Scope.TASKS_WORK)
@mutation
@body(EpochRequest)
def heartbeat(task_id: str, body: dict):
    return _lease(task_id, body["epoch"], settings.TASK_LEASE_SECONDS.get())


def _lease(task_id: str, epoch: int, seconds: float):
    """The current claim's lease ends ``seconds`` from now (0: now, a release)."""

    def work(conn):
        task_in_scope(conn, task_id)
        t = task_protocol.heartbeat(conn, current_principal().namespace_id, task_id, epoch, seconds)
        return 200, success({"task": task_protocol.task_view(t)})

    return idempotent(work)


@bp.post("/v1/tasks/<task_id>/complete")
@doc(
    summary="Complete a claimed task with its output",
    description=(
        "No receipt is stored: the completed task is the record (it keeps the Idempotency-Key). Resending "
        "a completion that was applied (same epoch and output) answers 200 again with "
        "`Idempotent-Replayed: true`; the key that completed it with another body (output or epoch) is 409 "
        "IDEMPOTENCY_CONFLICT; another output for that epoch under another key is 409 STATE_CONFLICT."
    ),
    tags=["tasks"],
    errors=(400, 401, 403, 404, 409),
    response=TaskResultResponse,
)
@requires(Scope.TASKS_WORK)
@mutation
@body(CompleteRequest)
def complete(task_id: str, body: dict):
    return _result(task_id, body["epoch"], "COMPLETED", body["output"])


def _result(task_id: str, epoch: int, state: str, value: Any, failure: dict | None = None):
    """A single result (``complete`` or ``fail``) with no receipt row: the task row is its receipt (with
    the request's Idempotency-Key as ``result_key``). A resend of a result that was applied (the task ended
    in ``state`` at ``epoch`` with this very ``value``) answers 200 again with ``Idempotent-Replayed:
    true``; the key of the result that ended the claim sent with another body is 409 IDEMPOTENCY_CONFLICT;
    any other result for an ended claim is refused as it would be without a key (409 STATE_CONFLICT).
    ``failure``: what the worker said of a failure (type, stack, worker; ``app.engine.traces``)."""
    t, replayed = _settle(task_id, epoch, state, value, request.headers["Idempotency-Key"], failure)
    return ok({"task": task_protocol.task_view(t)}, headers={REPLAYED_HEADER: "true"} if replayed else None)


def _settle(
    task_id: str, epoch: int, state: str, value: Any, key: str | None = None, failure: dict | None = None
) -> tuple[dict, bool]:
    """End the claim ``epoch`` of ``task_id`` in ``state`` (COMPLETED with an output, FAILED with an
    error) in its own transaction: ``(task, replayed)``, keeping the request's Idempotency-Key ``key``
    (None: a batch item, which has no key of its own). When it is refused because this very result was
    applied before, the task as it is, replayed; because ``key`` ended the claim with another body,
    IDEMPOTENCY_CONFLICT; else the refusal is raised."""
    p = current_principal()
    try:
        with transaction() as conn:
            end = task_protocol.complete if state == "COMPLETED" else task_protocol.fail
            t = end(conn, p.namespace_id, task_id, epoch, value, p.can_use_queue, key)
            traces.record_failure(conn, task_id, epoch, failure)  # its type, stack, worker (issue 47)
            return t, False
    except LedgerflowError as refused:  # rolled back
        with get_engine().connect() as conn:
            done = _applied_before(conn, task_id, epoch, state, value)
            # a StateConflict names a task in the caller's scope (one outside it is NotFound)
            if done is None and key is not None and isinstance(refused, StateConflict):
                if task_protocol.ended_with_key(conn, p.namespace_id, task_id, state, key):
                    raise idempotency.used_otherwise() from None
        if done is None:
            raise
        return done, True


@bp.post("/v1/tasks/complete")
@doc(
    summary="Complete up to 16 claimed tasks (each answered on its own)",
    description=(
        "Each item is completed exactly as `POST /v1/tasks/{id}/complete` would, in the order given, and "
        "answered in `results` (same order) with its own `status`: 200 with the task, or the status and "
        "error that item alone would get (404 NOT_FOUND, 409 STATE_CONFLICT). The items, and the claim "
        "below, share one short transaction when every one of them applies; when one is refused, each "
        "item is completed in its own transaction, so the others stand, and the claim runs in another. "
        "An item is "
        "idempotent by itself: repeating a completion that was applied (same id, epoch and output) "
        "answers 200 with `replayed: true`, so a whole request can be resent after a lost answer. The "
        "request as a whole answers 200 unless it is invalid, its `claim` is refused (below) or the "
        "service is unavailable.\n\n"
        "With `claim` ({queues, max_tasks}), the request then claims up to `max_tasks` tasks at once, "
        "answered in `claimed`: exactly `POST /v1/tasks/claim` with `wait_seconds` 0 and this request's "
        "Idempotency-Key (a resend with the same key and `claim` answers the same tasks again; the same key "
        "with another `claim` is 409 IDEMPOTENCY_CONFLICT). The claim runs after the completions, so it can "
        "take the task that a completion just created; its queues are checked before any item is completed "
        "(404 for a queue outside the credential's scope)."
    ),
    tags=["tasks"],
    errors=(400, 401, 403, 404, 409),
    response=CompleteManyResponse,
)
@requires(Scope.TASKS_WORK)
@mutation
@body(CompleteManyRequest)
def complete_many(body: dict):
    nxt = body.get("claim")
    claim: tuple[Key, Callable[[Connection], list[dict]]] | None = None
    if nxt is not None:  # refused before any completion: a claim that cannot run must not half-run
        queues = sorted(set(nxt["queues"]))
        check_queue_scope(current_principal(), queues)
        # the claim with this request's key, as POST /v1/tasks/claim would make it (no wait)
        key = request_key_as(
            "/v1/tasks/claim", {"queues": queues, "max_tasks": nxt["max_tasks"], "wait_seconds": 0}
        )
        claim = (key, lambda conn: _claim_keyed(conn, queues, nxt["max_tasks"], key, nxt.get("worker"))[0])
    items = body["tasks"]
    together = _together(items, claim)
    if together is not None:
        results, claimed = together
    else:  # each item in its own transaction, then the claim in its own
        results = [_complete_one(item) for item in items]
        claimed = idempotency.on_rows(claim[0], claim[1]) if claim is not None else None
    data: dict[str, Any] = {"results": results}
    if claim is not None:
        data["claimed"] = claimed
    return ok(data)


# What makes a request's shared transaction give way to one transaction per item: another request held a
# lock it needed (two batches that lock two instances in opposite orders deadlock; PostgreSQL ends one of
# them), or a serialization failure. Any other database error is the request's (500). The SQLSTATEs:
# deadlock_detected, serialization_failure, lock_not_available.
_CONTENDED = frozenset({"40P01", "40001", "55P03"})


def _together(
    items: list[dict], claim: tuple[Key, Callable[[Connection], list[dict]]] | None
) -> tuple[list[dict], list[dict] | None] | None:
    """A task worker's batch (its tasks that ended meanwhile, and the claim for the slots they freed) in
    ONE transaction, the items in the order given, then the claim (which can take a task a completion
    created): one BEGIN and one COMMIT, and the event rows of all its instances written together at the
    commit, instead of a transaction per item and one for the claim. The answers and the claimed tasks,
    or None when an item is refused (a lease lost, a result sent again), the claim is refused, or the
    transaction meets another request's lock: then it rolled back whole, and the caller completes each
    item in its own transaction and claims in another, exactly as alone. Either way the answers are those
    of items applied one after the other."""
    if len(items) < 2 and claim is None:
        return None
    p = current_principal()
    try:
        with transaction() as conn:
            done = [
                task_protocol.complete(
                    conn, p.namespace_id, item["id"], item["epoch"], item["output"], p.can_use_queue
                )
                for item in items
            ]
            claimed = idempotency.on_rows_in(conn, claim[0], claim[1]) if claim is not None else None
    except LedgerflowError:
        return None  # rolled back: one transaction per item decides each
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) not in _CONTENDED:
            raise
        return None
    return [_completed(item["id"], t, False) for item, t in zip(items, done, strict=True)], claimed


def _complete_one(item: dict) -> dict:
    task_id = item["id"]
    try:  # this item's own transaction: when it rolls back, the others stand
        t, replayed = _settle(task_id, item["epoch"], "COMPLETED", item["output"])
    except LedgerflowError as err:
        return {"id": task_id, "status": err.status, "error": {"code": err.code, "message": err.message}}
    return _completed(task_id, t, replayed)


def _completed(task_id: str, t: dict, replayed: bool) -> dict:
    return {
        "id": task_id,
        "status": 200,
        "task": task_protocol.task_view(t),
        **({"replayed": True} if replayed else {}),
    }


def _applied_before(conn, task_id: str, epoch: int, state: str, value: Any) -> dict | None:
    """The task when this very result ended it (``state`` at ``epoch``, the same output or error), else
    None."""
    try:
        t = task_in_scope(conn, task_id)
    except LedgerflowError:
        return None
    column = "output" if state == "COMPLETED" else "error"
    if t["state"] == state and t["epoch"] == epoch and _same_json(t[column], value):
        return t
    return None


def _same_json(a: Any, b: Any) -> bool:
    """Equal JSON values (``true`` is not ``1``; ``1`` equals ``1.0``; object key order is ignored)."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, int | Decimal) and isinstance(b, int | Decimal):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) is str and a == b


@bp.post("/v1/tasks/<task_id>/release")
@doc(
    summary="Hand a claimed task back to its queue now (a worker shutting down)",
    description=(
        "Ends the lease of the current claim at once, as if it had expired: the next claim takes the "
        "task (with a new epoch); no attempt is counted and no retry policy applies. An old epoch -> 409."
    ),
    tags=["tasks"],
    errors=(400, 401, 403, 404, 409),
    response=TaskResultResponse,
)
@requires(Scope.TASKS_WORK)
@mutation
@body(EpochRequest)
def release(task_id: str, body: dict):
    # a lease of 0 seconds: the claim is over now, exactly like a lease that ran out (X-TASK)
    return _lease(task_id, body["epoch"], 0)


@bp.post("/v1/tasks/<task_id>/fail")
@doc(
    summary="Fail a claimed task (retryable or not)",
    description=(
        "No receipt is stored: the failed task is the record (it keeps the Idempotency-Key). Resending a "
        "failure that was applied (same epoch and error) answers 200 again with `Idempotent-Replayed: "
        "true` (the retry policy ran once); the key that failed it with another body (error or epoch) is "
        "409 IDEMPOTENCY_CONFLICT; another error for that epoch under another key is 409 STATE_CONFLICT."
    ),
    tags=["tasks"],
    errors=(400, 401, 403, 404, 409),
    response=TaskResultResponse,
)
@requires(Scope.TASKS_WORK)
@mutation
@body(FailRequest)
def fail(task_id: str, body: dict):
    err = body["error"]
    return _result(
        task_id,
        body["epoch"],
        "FAILED",
        {"message": err["message"], "retryable": err["retryable"]},
        traces.failure_of(err, body.get("worker")),
    )


@bp.get("/v1/tasks/<task_id>")
@doc(summary="Read a task", tags=["tasks"], errors=(401, 403, 404), response=TaskResponse)
@requires(Scope.TASKS_WORK)
def get_task(task_id: str):
    with get_engine().connect() as conn:
        return ok(task_protocol.task_view(task_in_scope(conn, task_id)))
