"""Control (W-CTL) and signals (W-SIG) of a workflow instance: thin views over ``app.engine``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response

from app.auth import Scope
from app.db import get_engine
from app.engine import operator_commands, signals
from schemas.workflow_control import (
    ControlRequest,
    ControlResponse,
    PageQuery,
    SignalPageResponse,
    SignalRequest,
    SignalResponse,
    SignalResultResponse,
)
from web.auth import current_principal, requires
from web.engine_common import load_instance
from web.http import ok, request_id, success
from web.meta import doc
from web.mutation import idempotent, mutation
from web.strict import body, query

bp = Blueprint("workflow_control", __name__)
HEX32 = {"type": "string", "pattern": "^[0-9a-f]{32}$"}


def paged_read(instance_id: str, query: dict, read: Callable[..., Any], *args: Any) -> Response:
    """One page of an instance's history: ``read(conn, inst, *args, limit, cursor)``, after the
    instance's namespace and queue scope were checked (W-API-1)."""
    with get_engine().connect() as conn:
        inst = load_instance(conn, instance_id)
        return ok(read(conn, inst, *args, query["limit"], query.get("cursor")))


@bp.post("/v1/workflows/<instance_id>/control")
@doc(
    summary="Pause, resume or cancel a workflow (expected_control_revision, reason)",
    response=ControlResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404, 409, 413, 415, 503),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_CONTROL)
@mutation
@body(ControlRequest)
def control_workflow(instance_id: str, body: dict):
    principal = current_principal()

    def work(conn):
        view = operator_commands.control_workflow(conn, principal, instance_id, body, request_id=request_id())
        return 200, success({"instance": view, "deduplicated": False})

    return idempotent(work)


@bp.post("/v1/workflows/<instance_id>/signals")
@doc(
    summary="Send a signal to a step's activation (accepted as PENDING, consumed by its wait)",
    status=201,
    response=SignalResultResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404, 409, 413, 415, 503),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_SIGNAL)
@mutation
@body(SignalRequest)
def send_signal(instance_id: str, body: dict):
    principal = current_principal()

    def work(conn):
        view = operator_commands.send_signal(conn, principal, instance_id, body, request_id=request_id())
        return 201, success({"signal": view, "deduplicated": False})

    return idempotent(work)


@bp.get("/v1/workflows/<instance_id>/signals/<signal_id>")
@doc(
    summary="Read one signal (its current state)",
    response=SignalResponse,
    tags=["workflows"],
    errors=(401, 403, 404),
    path_params={"instance_id": HEX32, "signal_id": HEX32},
)
@requires(Scope.WORKFLOWS_READ)
def get_signal(instance_id: str, signal_id: str):
    with get_engine().connect() as conn:
        load_instance(conn, instance_id)
        return ok(signals.signal_view(signals.get_signal(conn, instance_id, signal_id)))


@bp.get("/v1/workflows/<instance_id>/signals")
@doc(
    summary="The signals of a workflow, newest first (history, paginated)",
    response=SignalPageResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_READ)
@query(PageQuery)
def list_signals(instance_id: str, query: dict):
    return paged_read(instance_id, query, signals.list_signals)
