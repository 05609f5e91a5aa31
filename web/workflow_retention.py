"""Retention of finished workflows: an operator's hold on one workflow, and what retention removes next
(thin views over ``app.engine.retention``)."""

from __future__ import annotations

from flask import Blueprint

from app.auth import Scope
from app.db import get_engine
from app.engine import operator_commands, retention
from schemas.retention import HoldRequest, HoldResponse, RetentionPreviewResponse, RetentionQuery
from web.auth import current_principal, requires
from web.http import ok, request_id, success
from web.meta import doc
from web.mutation import idempotent, mutation
from web.strict import body, query
from web.workflow_control import HEX32

bp = Blueprint("workflow_retention", __name__)


@bp.post("/v1/workflows/<instance_id>/hold")
@doc(
    summary="Keep a workflow past its namespace's retention until a time (hold_until), or release the hold (null)",
    response=HoldResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404, 409, 413, 415, 503),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_CONTROL)
@mutation
@body(HoldRequest)
def hold_workflow(instance_id: str, body: dict):
    principal = current_principal()

    def work(conn):
        view = operator_commands.hold_workflow(
            conn, principal, instance_id, body["hold_until"], body["reason"], request_id=request_id()
        )
        return 200, success(view)

    return idempotent(work)


@bp.get("/v1/retention")
@doc(
    summary="The namespace's workflow retention and the finished workflows it removes next, in order",
    response=RetentionPreviewResponse,
    tags=["workflows"],
    errors=(400, 401, 403),
)
@requires(Scope.WORKFLOWS_READ)
@query(RetentionQuery)
def next_removals(query: dict):
    principal = current_principal()
    with get_engine().connect() as conn:
        return ok(retention.next_removals(conn, principal.namespace_id, query["limit"]))
