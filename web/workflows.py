"""The public workflow API: start (W-START), reads (W-START-4, W-STEP) and the filtered list."""

from __future__ import annotations

from flask import Blueprint

from app.auth import Scope
from app.db import get_engine
from app.engine import instances, rerun, views
from app.observability import tracing
from schemas.workflow_ops import LinkedInstanceResponse
from schemas.workflows import (
    InstancePageResponse,
    InstanceResultResponse,
    ListQuery,
    StartRequest,
    StepDetailResponse,
    StepsResponse,
)
from web.auth import current_principal, requires
from web.engine_common import load_instance, start_audit, start_queue_check
from web.http import ok, request_id, success
from web.meta import doc
from web.mutation import idempotent_start, mutation
from web.strict import body, query

bp = Blueprint("workflows", __name__)


@bp.post("/v1/workflows")
@doc(
    summary="Start a workflow on a pinned definition version",
    status=201,
    response=InstanceResultResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404, 409, 413, 415, 429, 503),
)
@requires(Scope.WORKFLOWS_START)
@mutation
@body(StartRequest)
def start_workflow(body: dict):
    principal = current_principal()

    def work(conn, key):
        inst = instances.start_workflow(
            conn,
            principal.namespace_id,
            body,
            check_queues=start_queue_check(principal),
            on_created=start_audit(principal, request_id()),
            trace_id=tracing.current_trace_id(),  # tracing on: the ledger trace id = the OTel trace id
            start_key=(key.key, key.fp),
        )
        view = instances.instance_view(inst)
        return inst["id"], success({"instance": view, "deduplicated": False})

    return idempotent_start(work)


@bp.get("/v1/workflows/<instance_id>")
@doc(
    summary="Read a workflow instance (with its rerun links)",
    response=LinkedInstanceResponse,
    tags=["workflows"],
    errors=(401, 403, 404),
)
@requires(Scope.WORKFLOWS_READ)
def get_workflow(instance_id: str):
    with get_engine().connect() as conn:
        # with its rerun links (issue 47): ``rerun_of`` and ``reruns``
        return ok(rerun.with_links(conn, instances.instance_view(load_instance(conn, instance_id))))


@bp.get("/v1/workflows")
@doc(
    summary="List workflow instances (filters, cursor pagination)",
    response=InstancePageResponse,
    tags=["workflows"],
    errors=(400, 401, 403),
)
@requires(Scope.WORKFLOWS_READ)
@query(ListQuery)
def list_workflows(query: dict):
    principal = current_principal()
    with get_engine().connect() as conn:
        page = instances.list_instances(
            conn, principal.namespace_id, query["filters"], query["limit"], query["cursor"], principal.queues
        )
        return ok(page)


@bp.get("/v1/workflows/<instance_id>/steps")
@doc(
    summary="The steps of a workflow (current activations)",
    response=StepsResponse,
    tags=["workflows"],
    errors=(401, 403, 404),
)
@requires(Scope.WORKFLOWS_READ)
def get_workflow_steps(instance_id: str):
    # REPEATABLE READ as a connection option (psycopg then sends BEGIN ISOLATION LEVEL ...), not as a
    # statement: behind a transaction pooler the transaction's first statement sets the session settings
    with get_engine().connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
        load_instance(conn, instance_id)
        return ok(views.steps_view(conn, instance_id, current_principal().namespace_id))


@bp.get("/v1/workflows/<instance_id>/steps/<key>")
@doc(
    summary="One step and its current activation",
    response=StepDetailResponse,
    tags=["workflows"],
    errors=(401, 403, 404),
)
@requires(Scope.WORKFLOWS_READ)
def get_workflow_step(instance_id: str, key: str):
    with get_engine().connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
        load_instance(conn, instance_id)
        return ok(views.step_view(conn, instance_id, current_principal().namespace_id, key))
