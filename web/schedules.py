"""Schedules (X-SCHED): create / read / list / update / pause / resume / delete, launch now, fires.

Writes need ``workflows:start`` (a schedule starts workflows in the caller's name later; a definition
with task queues also needs ``tasks:submit`` and every queue in the credential's scope, as a start
does); reads need ``workflows:read``. Every write is audited (``app.integrations.schedules``)."""

from __future__ import annotations

from flask import Blueprint

from app.auth import Scope
from app.db import get_engine
from app.integrations import schedules
from schemas.schedules import (
    CreateScheduleRequest,
    DeletedResponse,
    FirePageResponse,
    FiresQuery,
    LaunchResponse,
    ListSchedulesQuery,
    PauseResponse,
    ScheduleActionRequest,
    SchedulePageResponse,
    ScheduleResponse,
    UpdateScheduleRequest,
)
from web.auth import current_principal, requires
from web.engine_common import start_queue_check
from web.http import ok, request_id, success
from web.meta import doc
from web.mutation import idempotent, mutation
from web.strict import body, query

bp = Blueprint("schedules", __name__)
ERRORS_WRITE = (400, 401, 403, 404, 409, 415)


def _check_queues(queues: list[str]) -> None:
    start_queue_check(current_principal())(queues)


@bp.post("/v1/schedules")
@doc(
    summary="Create a schedule (cron + time zone, or a fixed interval) of a pinned version",
    status=201,
    response=ScheduleResponse,
    tags=["schedules"],
    errors=ERRORS_WRITE,
)
@requires(Scope.WORKFLOWS_START)
@mutation
@body(CreateScheduleRequest)
def create_schedule(body: dict):
    principal = current_principal()

    def work(conn):
        view = schedules.create_schedule(
            conn, principal, body, request_id=request_id(), check_queues=_check_queues
        )
        return 201, success(view)

    return idempotent(work)


@bp.get("/v1/schedules")
@doc(
    summary="List the namespace's schedules",
    response=SchedulePageResponse,
    tags=["schedules"],
    errors=(400, 401, 403),
)
@requires(Scope.WORKFLOWS_READ)
@query(ListSchedulesQuery)
def list_schedules(query: dict):
    with get_engine().connect() as conn:
        return ok(
            schedules.list_schedules(
                conn, current_principal().namespace_id, query["limit"], query.get("cursor")
            )
        )


@bp.get("/v1/schedules/<schedule_id>")
@doc(
    summary="A schedule, its next five fire times and its last fire",
    response=ScheduleResponse,
    tags=["schedules"],
    errors=(401, 403, 404),
)
@requires(Scope.WORKFLOWS_READ)
def get_schedule(schedule_id: str):
    with get_engine().connect() as conn:
        return ok(schedules.get_schedule(conn, current_principal().namespace_id, schedule_id))


@bp.get("/v1/schedules/<schedule_id>/fires")
@doc(
    summary="The latest fires of a schedule (launched or skipped, with the reason)",
    response=FirePageResponse,
    tags=["schedules"],
    errors=(400, 401, 403, 404),
)
@requires(Scope.WORKFLOWS_READ)
@query(FiresQuery)
def list_fires(schedule_id: str, query: dict):
    with get_engine().connect() as conn:
        return ok(schedules.list_fires(conn, current_principal().namespace_id, schedule_id, query["limit"]))


@bp.patch("/v1/schedules/<schedule_id>")
@doc(
    summary="Change a schedule (a new rule counts from now)",
    response=ScheduleResponse,
    tags=["schedules"],
    errors=ERRORS_WRITE,
)
@requires(Scope.WORKFLOWS_START)
@mutation
@body(UpdateScheduleRequest)
def update_schedule(schedule_id: str, body: dict):
    principal = current_principal()

    def work(conn):
        view = schedules.update_schedule(
            conn, principal, schedule_id, body, request_id=request_id(), check_queues=_check_queues
        )
        return 200, success(view)

    return idempotent(work)


def _pause_or_resume(schedule_id: str, paused: bool, reason: str | None):
    principal = current_principal()

    def work(conn):
        return 200, success(
            schedules.set_paused(
                conn,
                principal,
                schedule_id,
                paused,
                request_id=request_id(),
                reason=reason,
                check_queues=_check_queues,
            )
        )

    return idempotent(work)


@bp.post("/v1/schedules/<schedule_id>/pause")
@doc(summary="Pause a schedule", response=PauseResponse, tags=["schedules"], errors=ERRORS_WRITE)
@requires(Scope.WORKFLOWS_START)
@mutation
@body(ScheduleActionRequest)
def pause_schedule(schedule_id: str, body: dict):
    return _pause_or_resume(schedule_id, True, body.get("reason"))


@bp.post("/v1/schedules/<schedule_id>/resume")
@doc(
    summary="Resume a schedule; fire times missed while paused are coalesced into one launch",
    response=PauseResponse,
    tags=["schedules"],
    errors=ERRORS_WRITE,
)
@requires(Scope.WORKFLOWS_START)
@mutation
@body(ScheduleActionRequest)
def resume_schedule(schedule_id: str, body: dict):
    return _pause_or_resume(schedule_id, False, body.get("reason"))


@bp.post("/v1/schedules/<schedule_id>/launch")
@doc(
    summary="Launch now: one MANUAL fire through a schedule_launch job",
    status=202,
    response=LaunchResponse,
    tags=["schedules"],
    errors=ERRORS_WRITE,
)
@requires(Scope.WORKFLOWS_START)
@mutation
@body(ScheduleActionRequest)
def launch_schedule(schedule_id: str, body: dict):
    principal = current_principal()

    def work(conn):
        return 202, success(
            schedules.launch_now(
                conn, principal, schedule_id, request_id=request_id(), reason=body.get("reason")
            )
        )

    return idempotent(work)


@bp.delete("/v1/schedules/<schedule_id>")
@doc(
    summary="Delete a schedule (launched instances keep their schedule_id)",
    response=DeletedResponse,
    tags=["schedules"],
    errors=(401, 403, 404, 409),
)
@requires(Scope.WORKFLOWS_START)
@mutation
def delete_schedule(schedule_id: str):
    principal = current_principal()

    def work(conn):
        return 200, success(schedules.delete_schedule(conn, principal, schedule_id, request_id=request_id()))

    return idempotent(work)
