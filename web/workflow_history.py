"""Operation audit (W-AUDIT), recovery (X-RECOVER) and history (X-HIST) of a workflow instance."""

from __future__ import annotations

from flask import Blueprint

from app.auth import Scope
from app.db import get_engine
from app.engine import history, operator_commands
from schemas.workflow_control import PageQuery
from schemas.workflow_history import (
    ActivationPageResponse,
    OperationPageResponse,
    OperationResponse,
    RecoveryRequest,
    RecoveryResponse,
    RoundPageResponse,
    SignalAuditQuery,
    WorkflowEventPageResponse,
)
from web.auth import current_principal, requires
from web.engine_common import load_instance
from web.http import ok, request_id, success
from web.meta import doc
from web.mutation import idempotent, mutation
from web.strict import body, query
from web.workflow_control import HEX32, paged_read

bp = Blueprint("workflow_history", __name__)
STEP_KEY = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"}


@bp.get("/v1/workflows/<instance_id>/operations")
@doc(
    summary="Operation audit of a workflow, newest first (limit 1-100, bound cursor)",
    response=OperationPageResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_AUDIT_READ)
@query(PageQuery)
def list_operations(instance_id: str, query: dict):
    return paged_read(instance_id, query, history.operations)


@bp.get("/v1/workflows/<instance_id>/events")
@doc(
    summary="Events of a workflow in sequence order (state changes of the instance, its steps, tasks and "
    "signals; limit 1-100, bound cursor)",
    response=WorkflowEventPageResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_READ)
@query(PageQuery)
def list_events(instance_id: str, query: dict):
    return paged_read(instance_id, query, history.events)


@bp.get("/v1/workflows/<instance_id>/operations/<operation_id>")
@doc(
    summary="One audited operation with reason, evidence_ref, before and after",
    response=OperationResponse,
    tags=["workflows"],
    errors=(401, 403, 404),
    path_params={"instance_id": HEX32, "operation_id": HEX32},
)
@requires(Scope.WORKFLOWS_AUDIT_READ)
def get_operation(instance_id: str, operation_id: str):
    with get_engine().connect() as conn:
        inst = load_instance(conn, instance_id)
        return ok(history.operation(conn, inst, operation_id))


@bp.get("/v1/workflows/<instance_id>/signal-operations")
@doc(
    summary="Signal-resource audit of a workflow, newest first (acceptance, consumption, rejection, expiry; "
    "limit 1-100, bound cursor, optional signal_id)",
    response=OperationPageResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_AUDIT_READ)
@query(SignalAuditQuery)
def list_signal_operations(instance_id: str, query: dict):
    return paged_read(instance_id, query, history.signal_operations, query.get("signal_id"))


@bp.get("/v1/workflows/<instance_id>/signal-operations/<operation_id>")
@doc(
    summary="One signal-resource audit entry with reason, evidence_ref, before and after",
    response=OperationResponse,
    tags=["workflows"],
    errors=(401, 403, 404),
    path_params={"instance_id": HEX32, "operation_id": HEX32},
)
@requires(Scope.WORKFLOWS_AUDIT_READ)
def get_signal_operation(instance_id: str, operation_id: str):
    with get_engine().connect() as conn:
        inst = load_instance(conn, instance_id)
        return ok(history.operation(conn, inst, operation_id, signal=True))


@bp.post("/v1/workflows/<instance_id>/recovery")
@doc(
    summary="Resolve a NEEDS_REVIEW step (RETRY_STEP, SUCCEED_STEP with output, FAIL_STEP) or instance "
    "(RESOLVE_INSTANCE with resolution CONTINUE, CANCEL or FAIL)",
    response=RecoveryResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404, 409, 413, 415, 503),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_RECOVERY)
@mutation
@body(RecoveryRequest)
def recover(instance_id: str, body: dict):
    principal = current_principal()

    def work(conn):
        out = operator_commands.recover_workflow(conn, principal, instance_id, body, request_id=request_id())
        return 200, success({**out, "deduplicated": False})

    return idempotent(work)


@bp.get("/v1/workflows/<instance_id>/steps/<key>/activations")
@doc(
    summary="Every activation of a step, newest first (history)",
    response=ActivationPageResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404),
    path_params={"instance_id": HEX32, "key": STEP_KEY},
)
@requires(Scope.WORKFLOWS_READ)
@query(PageQuery)
def list_activations(instance_id: str, key: str, query: dict):
    return paged_read(instance_id, query, history.activations, key)


@bp.get("/v1/workflows/<instance_id>/steps/<key>/rounds")
@doc(
    summary="Every task attempt / poll round of a step over all its activations, newest first",
    response=RoundPageResponse,
    tags=["workflows"],
    errors=(400, 401, 403, 404),
    path_params={"instance_id": HEX32, "key": STEP_KEY},
)
@requires(Scope.WORKFLOWS_READ)
@query(PageQuery)
def list_rounds(instance_id: str, key: str, query: dict):
    return paged_read(instance_id, query, history.rounds, key)
