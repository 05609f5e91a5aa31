"""The task protocol for task workers (X-TASK): claim (long-poll), heartbeat, complete, fail, read."""

from __future__ import annotations

import time

from flask import Blueprint

import web.long_poll as long_poll
from app.auth import Scope
from app.db import get_engine
from app.engine import settings, tasks
from app.engine.operations import check_queue_scope
from schemas.tasks import (
    ClaimRequest,
    ClaimResponse,
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
from web.mutation import NothingYet, Replay, idempotent, mutation
from web.strict import body

bp = Blueprint("tasks", __name__)


@bp.post("/v1/tasks/claim")
@doc(
    summary="Claim tasks from queues (long-poll up to 30 s)",
    response=ClaimResponse,
    tags=["tasks"],
    errors=(400, 401, 403, 404),
)
@requires(Scope.TASKS_WORK)
@mutation
@body(ClaimRequest)
def claim(body: dict):  # noqa: ANN201
    principal = current_principal()
    queues = sorted(set(body["queues"]))
    check_queue_scope(principal, queues)
    deadline = time.monotonic() + body["wait_seconds"]

    def work(conn):  # noqa: ANN001, ANN202
        final = time.monotonic() >= deadline
        got = tasks.claim(
            conn, principal.namespace_id, queues, body["max_tasks"], settings.task_lease_seconds()
        )
        if not got and not final:
            raise NothingYet  # an empty try rolls back (no receipt kept)
        return 200, success({"tasks": [_claimed(t) for t in got]})

    if body["wait_seconds"] <= 0:  # one try: no long-poll slot, no wake-ups
        return idempotent(work, replay=Replay.STORED)
    with long_poll.waiting_claim(principal, queues, settings.claim_poll_seconds()) as wait:
        return idempotent(work, replay=Replay.STORED, wait_until=deadline, wait=wait)


def _claimed(t: dict) -> dict:
    view = tasks.task_view(t)
    return {
        "id": t["id"],
        "queue": t["queue"],
        "input": view.get("input"),
        "epoch": t["epoch"],
        "lease_expires_at": view.get("lease_expires_at"),
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
def heartbeat(task_id: str, body: dict):  # noqa: ANN201
    epoch = body["epoch"]

    def work(conn):  # noqa: ANN001, ANN202
        task_in_scope(conn, task_id)
        t = tasks.heartbeat(
            conn, current_principal().namespace_id, task_id, epoch, settings.task_lease_seconds()
        )
        return 200, success({"task": tasks.task_view(t)})

    return idempotent(work)


@bp.post("/v1/tasks/<task_id>/complete")
@doc(
    summary="Complete a claimed task with its output",
    tags=["tasks"],
    errors=(400, 401, 403, 404, 409),
    response=TaskResultResponse,
)
@requires(Scope.TASKS_WORK)
@mutation
@body(CompleteRequest)
def complete(task_id: str, body: dict):  # noqa: ANN201
    epoch = body["epoch"]

    def work(conn):  # noqa: ANN001, ANN202
        task_in_scope(conn, task_id)
        t = tasks.complete(conn, current_principal().namespace_id, task_id, epoch, body["output"])
        return 200, success({"task": tasks.task_view(t)})

    return idempotent(work)


@bp.post("/v1/tasks/<task_id>/fail")
@doc(
    summary="Fail a claimed task (retryable or not)",
    tags=["tasks"],
    errors=(400, 401, 403, 404, 409),
    response=TaskResultResponse,
)
@requires(Scope.TASKS_WORK)
@mutation
@body(FailRequest)
def fail(task_id: str, body: dict):  # noqa: ANN201
    epoch = body["epoch"]
    err = body["error"]

    def work(conn):  # noqa: ANN001, ANN202
        task_in_scope(conn, task_id)
        t = tasks.fail(
            conn,
            current_principal().namespace_id,
            task_id,
            epoch,
            {"message": err["message"], "retryable": err["retryable"]},
        )
        return 200, success({"task": tasks.task_view(t)})

    return idempotent(work)


@bp.get("/v1/tasks/<task_id>")
@doc(summary="Read a task", tags=["tasks"], errors=(401, 403, 404), response=TaskResponse)
@requires(Scope.TASKS_WORK)
def get_task(task_id: str):  # noqa: ANN201
    with get_engine().connect() as conn:
        return ok(tasks.task_view(task_in_scope(conn, task_id)))
