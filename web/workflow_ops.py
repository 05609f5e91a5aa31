"""Operator actions on workflows (issue 47): rerun one, act on many (batch with preview), failure groups.
Thin: the domain functions (``app.engine.rerun``, ``batch``, ``failure_groups``) do the work and the audit."""

from __future__ import annotations

from flask import Blueprint

from app.auth import Scope
from app.db import get_engine
from app.engine import batch, failure_groups, rerun
from schemas.workflow_ops import (
    BatchRequest,
    BatchResponse,
    FailureGroupsResponse,
    GroupsQuery,
    RerunRequest,
    RerunResponse,
)
from web.auth import current_principal, requires
from web.http import ok, request_id, success
from web.meta import doc
from web.mutation import idempotent, mutation
from web.strict import body, query

bp = Blueprint("workflow_ops", __name__)
HEX32 = {"type": "string", "pattern": "^[0-9a-f]{32}$"}


@bp.post("/v1/workflows/<instance_id>/rerun")
@doc(
    summary="Rerun a FAILED or CANCELLED workflow as a new one, from the start or from a step",
    description=(
        "Starts a new workflow on the same (or `version`) published version with the old input and business "
        "key. With `from_step`, the steps the rerun rule copies keep the old outputs (SUCCEEDED, "
        "`copied_from`, never run) and the step and those after it run again. The old workflow is not "
        "changed; both are linked (`rerun_of` / `reruns`) and audited with the reason. A refused rerun is "
        "409 STATE_CONFLICT with the rule's reason."
    ),
    status=201,
    response=RerunResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404, 409, 413, 415, 429, 503),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_CONTROL)
@mutation
@body(RerunRequest)
def rerun_workflow(instance_id: str, body: dict):
    principal = current_principal()

    def work(conn):
        return 201, success(rerun.rerun_workflow(conn, principal, instance_id, body, request_id=request_id()))

    return idempotent(work)


@bp.post("/v1/workflows/batch")
@doc(
    summary="Cancel, pause, resume or rerun many workflows (ids or a list filter), with a preview",
    description=(
        "At most `LEDGERFLOW_WORKFLOW_BATCH_MAX` workflows per request (a filter acts on the newest that "
        "many; `remaining` says how many more match). `preview: true` changes nothing and answers what "
        "would happen. Each workflow is audited on its own, the batch once more."
    ),
    response=BatchResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 409, 413, 415, 429, 503),
)
@requires(Scope.WORKFLOWS_CONTROL)
@mutation
@body(BatchRequest)
def batch_workflows(body: dict):
    principal = current_principal()

    def work(conn):
        return 200, success(batch.batch(conn, principal, body, request_id=request_id()))

    return idempotent(work)


@bp.get("/v1/workflows/failure-groups")
@doc(
    summary="FAILED and NEEDS_REVIEW workflows grouped by definition, step, error code and normalised message",
    response=FailureGroupsResponse,
    tags=["workflows"],
    errors=(400, 401, 403),
)
@requires(Scope.WORKFLOWS_READ)
@query(GroupsQuery)
def get_failure_groups(query: dict):
    principal = current_principal()
    with get_engine().connect() as conn:
        return ok(
            failure_groups.groups(
                conn,
                principal.namespace_id,
                principal.queues,
                definition_id=query.get("definition_id"),
                limit=query["limit"],
            )
        )
