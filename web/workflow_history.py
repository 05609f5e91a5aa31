"""Operation audit (W-AUDIT), recovery (X-RECOVER) and history (X-HIST) of a workflow instance."""

from __future__ import annotations

from flask import Blueprint
from marshmallow import Schema, fields

from app.auth import Scope
from app.db import get_engine
from app.engine import history, instances, oplog, recovery, review
from web.auth import current_principal, requires
from web.engine_common import idempotent, ok
from web.http import request_id
from web.meta import doc
from web.mutation import mutation
from web.strict import body, query
from web.workflow_control import HEX32, PageQuery, load_instance, paged_read

bp = Blueprint("workflow_history", __name__)
STEP_KEY = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"}


class RecoverySchema(Schema):
    action = fields.Raw(required=True)
    step_key = fields.Raw()
    resolution = fields.Raw()
    output = fields.Raw(allow_none=True)
    reason = fields.Raw(required=True)
    evidence_ref = fields.Raw()


@bp.get("/v1/workflows/<instance_id>/operations")
@doc(
    summary="Operation audit of a workflow, newest first (limit 1-100, bound cursor)",
    tags=["workflows"],
    errors=(400, 401, 403, 404),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_AUDIT_READ)
@query(PageQuery)
def list_operations(instance_id: str, query: dict):  # noqa: ANN201
    return paged_read(instance_id, query, history.operations)


@bp.get("/v1/workflows/<instance_id>/operations/<operation_id>")
@doc(
    summary="One audited operation with reason, evidence_ref, before and after",
    tags=["workflows"],
    errors=(401, 403, 404),
    path_params={"instance_id": HEX32, "operation_id": HEX32},
)
@requires(Scope.WORKFLOWS_AUDIT_READ)
def get_operation(instance_id: str, operation_id: str):  # noqa: ANN201
    with get_engine().connect() as conn:
        inst = load_instance(conn, instance_id)
        return ok(history.operation(conn, inst, operation_id))


class SignalAuditQuery(PageQuery):
    signal_id = fields.String()


@bp.get("/v1/workflows/<instance_id>/signal-operations")
@doc(
    summary="Signal-resource audit of a workflow, newest first (acceptance, consumption, rejection, expiry; "
    "limit 1-100, bound cursor, optional signal_id)",
    tags=["workflows"],
    errors=(400, 401, 403, 404),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_AUDIT_READ)
@query(SignalAuditQuery)
def list_signal_operations(instance_id: str, query: dict):  # noqa: ANN201
    return paged_read(instance_id, query, history.signal_operations, query.get("signal_id"))


@bp.get("/v1/workflows/<instance_id>/signal-operations/<operation_id>")
@doc(
    summary="One signal-resource audit entry with reason, evidence_ref, before and after",
    tags=["workflows"],
    errors=(401, 403, 404),
    path_params={"instance_id": HEX32, "operation_id": HEX32},
)
@requires(Scope.WORKFLOWS_AUDIT_READ)
def get_signal_operation(instance_id: str, operation_id: str):  # noqa: ANN201
    with get_engine().connect() as conn:
        inst = load_instance(conn, instance_id)
        return ok(history.operation(conn, inst, operation_id, signal=True))


@bp.post("/v1/workflows/<instance_id>/recovery")
@doc(
    summary="Resolve a NEEDS_REVIEW step (RETRY_STEP, SUCCEED_STEP with output, FAIL_STEP) or instance "
    "(RESOLVE_INSTANCE with resolution CONTINUE, CANCEL or FAIL)",
    tags=["workflows"],
    errors=(400, 401, 403, 404, 409, 413, 415, 503),
    path_params={"instance_id": HEX32},
)
@requires(Scope.WORKFLOWS_RECOVERY)
@mutation
@body(RecoverySchema)
def recover(instance_id: str, body: dict):  # noqa: ANN201
    principal = current_principal()
    req = recovery.validate_recovery(body)

    def work(conn):  # noqa: ANN001, ANN202
        load_instance(conn, instance_id)
        if req["action"] == "RESOLVE_INSTANCE":
            return resolve_instance(conn, instance_id, req, principal)
        before, after, step = recovery.recover(conn, instance_id, req)
        view = instances.instance_view(after)
        audit_id = oplog.operation(
            conn,
            principal,
            instance_id,
            f"workflow.recovery.{req['action'].lower()}",
            request_id=request_id(),
            reason=req["reason"],
            evidence_ref=req["evidence_ref"],
            before=instances.instance_view(before),
            after={"instance": view, "step": step},
            target_type="step",
            target_id=req["step_key"],
        )
        data = {"instance": view, "step": step, "operation_id": audit_id, "deduplicated": False}
        return 200, {"request_id": request_id(), "data": data}

    return idempotent(work, created=False)


def resolve_instance(conn, instance_id: str, req: dict, principal):  # noqa: ANN001, ANN201
    before, after, summary = review.resolve_instance(conn, instance_id, req)
    view = instances.instance_view(after)
    audit_id = oplog.operation(
        conn,
        principal,
        instance_id,
        "workflow.recovery.resolve_instance",
        request_id=request_id(),
        reason=req["reason"],
        evidence_ref=req["evidence_ref"],
        before=instances.instance_view(before),
        after={"instance": view, "resolution": summary},
    )
    data = {"instance": view, "resolution": summary, "operation_id": audit_id, "deduplicated": False}
    return 200, {"request_id": request_id(), "data": data}


@bp.get("/v1/workflows/<instance_id>/steps/<key>/activations")
@doc(
    summary="Every activation of a step, newest first (history)",
    tags=["workflows"],
    errors=(400, 401, 403, 404),
    path_params={"instance_id": HEX32, "key": STEP_KEY},
)
@requires(Scope.WORKFLOWS_READ)
@query(PageQuery)
def list_activations(instance_id: str, key: str, query: dict):  # noqa: ANN201
    return paged_read(instance_id, query, history.activations, key)


@bp.get("/v1/workflows/<instance_id>/steps/<key>/rounds")
@doc(
    summary="Every task attempt / poll round of a step over all its activations, newest first",
    tags=["workflows"],
    errors=(400, 401, 403, 404),
    path_params={"instance_id": HEX32, "key": STEP_KEY},
)
@requires(Scope.WORKFLOWS_READ)
@query(PageQuery)
def list_rounds(instance_id: str, key: str, query: dict):  # noqa: ANN201
    return paged_read(instance_id, query, history.rounds, key)
