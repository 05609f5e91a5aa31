"""The task protocol for task workers (X-TASK): claim (long-poll), heartbeat, complete, fail, read."""

from __future__ import annotations

import time

from flask import Blueprint, request
from marshmallow import Schema, fields

from app import idempotency, jsonx
from app.auth import Scope
from app.db import get_engine
from app.engine import settings, tasks
from app.engine.documents import QUEUE_RE
from app.engine.instances import MAX_INPUT_BYTES
from app.errors import FieldError, InvalidArgument
from web.auth import current_principal, requires
from web.engine_common import check_queue_scope, idempotent, ok
from web.http import raw_json_response, request_id
from web.meta import doc
from web.mutation import mutation
from web.strict import body, read_json_body

bp = Blueprint("tasks", __name__)


class ClaimSchema(Schema):
    queues = fields.Raw(required=True)
    wait_seconds = fields.Raw()
    max_tasks = fields.Raw()


class EpochSchema(Schema):
    epoch = fields.Raw(required=True)


class CompleteSchema(Schema):
    epoch = fields.Raw(required=True)
    output = fields.Raw(required=True, allow_none=True)


class ErrorSchema(Schema):
    message = fields.Raw(required=True)
    retryable = fields.Raw(required=True)


class FailSchema(Schema):
    epoch = fields.Raw(required=True)
    error = fields.Nested(ErrorSchema, required=True)


def _int(errors: list, name: str, v: object, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        errors.append(FieldError(name, f"an integer from {lo} to {hi}"))
        return lo
    return v


def _epoch(body: dict) -> int:
    errors: list[FieldError] = []
    e = _int(errors, "epoch", body["epoch"], 1, 2**31 - 1)
    if errors:
        raise InvalidArgument(errors=errors)
    return e


class _NothingYet(Exception):
    pass


@bp.post("/v1/tasks/claim")
@doc(summary="Claim tasks from queues (long-poll up to 30 s)", tags=["tasks"], errors=(400, 401, 403, 404))
@requires(Scope.TASKS_WORK)
@mutation
@body(ClaimSchema)
def claim(body: dict):  # noqa: ANN201
    principal = current_principal()
    errors: list[FieldError] = []
    queues = body["queues"]
    if not isinstance(queues, list) or not 1 <= len(queues) <= 16:
        errors.append(FieldError("queues", "an array of 1 to 16 queue names"))
        queues = []
    for i, q in enumerate(queues):
        if not isinstance(q, str) or not QUEUE_RE.match(q):
            errors.append(FieldError(f"queues[{i}]", "a queue name"))
    wait = _int(errors, "wait_seconds", body.get("wait_seconds", 0), 0, 30)
    max_tasks = _int(errors, "max_tasks", body.get("max_tasks", 1), 1, 16)
    if errors:
        raise InvalidArgument(errors=errors)
    check_queue_scope(principal, queues)
    deadline = time.monotonic() + wait
    key = idempotency.validate_key(request.headers.get("Idempotency-Key"))
    fp = idempotency.fingerprint(request.method, request.path, read_json_body())
    while True:
        final = time.monotonic() >= deadline

        def work(conn, final=final):  # noqa: ANN001, ANN202
            got = tasks.claim(
                conn, principal.namespace_id, sorted(set(queues)), max_tasks, settings.task_lease_seconds()
            )
            if not got and not final:
                raise _NothingYet
            return 200, {"request_id": request_id(), "data": {"tasks": [_claimed(t) for t in got]}}

        try:  # each try is one short transaction; an empty try rolls back (no receipt kept)
            stored = idempotency.execute_once(
                scope=principal.namespace_id, route="POST /v1/tasks/claim", key=key, fp=fp, work=work
            )
            break
        except _NothingYet:
            time.sleep(min(settings.claim_poll_seconds(), max(0.0, deadline - time.monotonic())))
    headers = {"Idempotent-Replayed": "true"} if stored.replayed else {}
    return raw_json_response(stored.body, stored.status, headers)


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


def _task_in_scope(conn, task_id: str) -> dict:  # noqa: ANN001
    principal = current_principal()
    task = tasks.read_task(conn, task_id, principal.namespace_id)
    check_queue_scope(principal, [task["queue"]])
    return task


@bp.post("/v1/tasks/<task_id>/heartbeat")
@doc(summary="Extend the lease of a claimed task", tags=["tasks"], errors=(400, 401, 403, 404, 409))
@requires(Scope.TASKS_WORK)
@mutation
@body(EpochSchema)
def heartbeat(task_id: str, body: dict):  # noqa: ANN201
    epoch = _epoch(body)

    def work(conn):  # noqa: ANN001, ANN202
        _task_in_scope(conn, task_id)
        t = tasks.heartbeat(
            conn, current_principal().namespace_id, task_id, epoch, settings.task_lease_seconds()
        )
        return 200, {"request_id": request_id(), "data": {"task": tasks.task_view(t)}}

    return idempotent(work, created=False)


@bp.post("/v1/tasks/<task_id>/complete")
@doc(summary="Complete a claimed task with its output", tags=["tasks"], errors=(400, 401, 403, 404, 409))
@requires(Scope.TASKS_WORK)
@mutation
@body(CompleteSchema)
def complete(task_id: str, body: dict):  # noqa: ANN201
    epoch = _epoch(body)
    raw = jsonx.dumps(body["output"])
    if len(raw.encode()) > MAX_INPUT_BYTES or "\\u0000" in raw:
        raise InvalidArgument("output: at most 256 KiB of JSON without NUL characters", field="output")

    def work(conn):  # noqa: ANN001, ANN202
        _task_in_scope(conn, task_id)
        t = tasks.complete(conn, current_principal().namespace_id, task_id, epoch, body["output"])
        return 200, {"request_id": request_id(), "data": {"task": tasks.task_view(t)}}

    return idempotent(work, created=False)


@bp.post("/v1/tasks/<task_id>/fail")
@doc(summary="Fail a claimed task (retryable or not)", tags=["tasks"], errors=(400, 401, 403, 404, 409))
@requires(Scope.TASKS_WORK)
@mutation
@body(FailSchema)
def fail(task_id: str, body: dict):  # noqa: ANN201
    epoch = _epoch(body)
    err = body["error"]
    errors = []
    if not isinstance(err["message"], str) or len(err["message"]) > 4096 or "\x00" in err["message"]:
        errors.append(FieldError("error.message", "a string of at most 4096 characters"))
    if not isinstance(err["retryable"], bool):
        errors.append(FieldError("error.retryable", "true or false (never defaulted)"))
    if errors:
        raise InvalidArgument(errors=errors)

    def work(conn):  # noqa: ANN001, ANN202
        _task_in_scope(conn, task_id)
        t = tasks.fail(
            conn,
            current_principal().namespace_id,
            task_id,
            epoch,
            {"message": err["message"], "retryable": err["retryable"]},
        )
        return 200, {"request_id": request_id(), "data": {"task": tasks.task_view(t)}}

    return idempotent(work, created=False)


@bp.get("/v1/tasks/<task_id>")
@doc(summary="Read a task", tags=["tasks"], errors=(401, 403, 404))
@requires(Scope.TASKS_WORK)
def get_task(task_id: str):  # noqa: ANN201
    with get_engine().connect() as conn:
        return ok(tasks.task_view(_task_in_scope(conn, task_id)))
