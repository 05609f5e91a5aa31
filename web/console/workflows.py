"""Workflow pages (W-CTL, X-RECOVER, X-HIST) and the human-task page (X-TASK). Validation is the API's
schemas; control and recovery are the operator commands of ``app.engine.operations`` (the API's own
calls, the same audit rows); tasks go through the task protocol functions."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from flask import Response, render_template, request, session

import schemas
from app import settings
from app.auth import Scope
from app.db import transaction
from app.engine import history, instances, operations, signals, tasks, views
from app.engine.control import OPERATIONS
from app.engine.recovery import ACTIONS, RESOLUTIONS
from app.errors import NotFound
from schemas.tasks import ClaimRequest, CompleteRequest, FailRequest
from schemas.workflow_control import ControlRequest
from schemas.workflow_history import RecoveryRequest
from schemas.workflows import ListQuery
from web.console.common import (
    CLAIMED_KEY,
    MAX_CLAIMED,
    bp,
    can,
    clean_args,
    done,
    json_field,
    page,
    principal,
    read,
    require_confirmation,
)
from web.engine_common import load_instance
from web.http import request_id
from web.tasks import task_in_scope

READ = Scope.WORKFLOWS_READ
HISTORY_PAGE = 20
LIST_FIELDS = ("state", "paused", "definition_id", "version", "business_key", "business_key_prefix",
               "created_after", "created_before")  # fmt: skip


@bp.get("/workflows")
@page(READ)
def workflows() -> str:
    raw = {k: v for k, v in clean_args(request.args).items() if k in (*LIST_FIELDS, "cursor")}
    q = schemas.load(ListQuery(), {"limit": "50", **raw})  # a query string, as the API reads it
    p = principal()
    data = read(
        lambda c: instances.list_instances(c, p.namespace_id, q["filters"], q["limit"], q["cursor"], p.queues)
    )
    next_url = None
    if data.get("next_cursor"):
        kept = [(k, v) for k, v in raw.items() if k != "cursor"]
        next_url = "?" + urlencode([*kept, ("cursor", data["next_cursor"])])
    return render_template(
        "console/workflows.html", items=data["items"], filters=raw, next_url=next_url, states=instances.STATES
    )


def _detail(conn: Any, instance_id: str) -> dict[str, Any]:
    inst = load_instance(conn, instance_id)
    out: dict[str, Any] = {
        "instance": instances.instance_view(inst),
        "steps": views.steps_view(conn, instance_id, inst["namespace_id"])["steps"],
        "signals": signals.list_signals(conn, inst, HISTORY_PAGE, None)["items"],
    }
    if can(Scope.WORKFLOWS_AUDIT_READ):
        out["operations"] = history.operations(conn, inst, HISTORY_PAGE, None)["items"]
    return out


@bp.get("/workflows/<instance_id>")
@page(READ)
def workflow(instance_id: str) -> str:
    d = read(lambda c: _detail(c, instance_id))
    return render_template(
        "console/workflow.html", **d, operations_list=OPERATIONS, actions=ACTIONS, resolutions=RESOLUTIONS
    )


@bp.get("/workflows/<instance_id>/steps/<key>")
@page(READ)
def workflow_step(instance_id: str, key: str) -> str:
    def load(conn: Any) -> dict[str, Any]:
        inst = load_instance(conn, instance_id)
        return {
            "instance": instances.instance_view(inst),
            "step": views.step_view(conn, instance_id, inst["namespace_id"], key),
            "activations": history.activations(conn, inst, key, HISTORY_PAGE, None)["items"],
            "rounds": history.rounds(conn, inst, key, HISTORY_PAGE, None)["items"],
        }

    return render_template("console/step.html", **read(load))


@bp.post("/workflows/<instance_id>/control")
@page(Scope.WORKFLOWS_CONTROL)
def workflow_control(instance_id: str) -> Response:
    req = schemas.load(
        ControlRequest(),
        {k: request.form.get(k, "") for k in ("operation", "expected_control_revision", "reason")},
    )
    with transaction() as conn:
        view = operations.control_workflow(conn, principal(), instance_id, req, request_id=request_id())
    paused = " (paused)" if view["paused"] else ""
    return done(f"{req['operation'].capitalize()} applied: {view['state']}{paused}, control revision "
                f"{view['control_revision']}.", "console.workflow", instance_id=instance_id)  # fmt: skip


@bp.post("/workflows/<instance_id>/recovery")
@page(Scope.WORKFLOWS_RECOVERY)
def workflow_recovery(instance_id: str) -> Response:
    form = request.form
    raw: dict[str, Any] = {k: form[k] for k in ("action", "step_key", "resolution", "reason", "evidence_ref")
                           if form.get(k, "").strip()}  # fmt: skip
    if raw.get("action") == "SUCCEED_STEP":
        raw["output"] = json_field(form.get("output"), "output")
    req = schemas.load(RecoveryRequest(), raw)
    require_confirmation(form)
    with transaction() as conn:
        out = operations.recover_workflow(conn, principal(), instance_id, req, request_id=request_id())
    return done(f"{req['action']} applied: the workflow is {out['instance']['state']}.", "console.workflow",
                instance_id=instance_id)  # fmt: skip


# --------------------------------------------------------------------------- human tasks
def _claimed() -> dict[str, int]:
    got = session.get(CLAIMED_KEY)
    return {str(k): int(v) for k, v in got.items()} if isinstance(got, dict) else {}


@bp.get("/tasks")
@page(Scope.TASKS_WORK)
def tasks_page() -> str:
    p = principal()
    rows = read(lambda c: tasks.open_tasks(c, p.namespace_id, p.queues, 100))
    mine = _claimed()
    open_ = [
        tasks.task_view(t) | {"mine": mine.get(t["id"]) == t["epoch"] and t["state"] == "CLAIMED"}
        for t in rows
    ]
    queues = sorted({t["queue"] for t in open_} | set(p.queues or ()))
    return render_template("console/tasks.html", tasks=open_, queues=queues)


@bp.post("/tasks/claim")
@page(Scope.TASKS_WORK)
def task_claim() -> Response:
    body = schemas.load(
        ClaimRequest(), {"queues": [request.form.get("queue", "")], "max_tasks": 1, "wait_seconds": 0}
    )
    p = principal()
    operations.check_queue_scope(p, body["queues"])
    with transaction() as conn:
        got = tasks.claim(conn, p.namespace_id, body["queues"], 1, settings.TASK_LEASE_SECONDS.get())
    if not got:
        return done(f"No open task on {body['queues'][0]} right now.", "console.tasks_page")
    mine = _claimed()
    mine[got[0]["id"]] = got[0]["epoch"]
    session[CLAIMED_KEY] = dict(list(mine.items())[-MAX_CLAIMED:])
    return done(f"Claimed task {got[0]['id']} (step {got[0]['step_key']}).", "console.tasks_page")


def _epoch(task_id: str) -> int:
    epoch = _claimed().get(task_id)
    if epoch is None:
        raise NotFound("this session has not claimed that task (claim it first)")
    return epoch


def _forget(task_id: str) -> None:
    mine = _claimed()
    mine.pop(task_id, None)
    session[CLAIMED_KEY] = mine


@bp.post("/tasks/<task_id>/complete")
@page(Scope.TASKS_WORK)
def task_complete(task_id: str) -> Response:
    body = schemas.load(
        CompleteRequest(),
        {"epoch": _epoch(task_id), "output": json_field(request.form.get("output"), "output")},
    )
    p = principal()
    with transaction() as conn:
        task_in_scope(conn, task_id)
        t = tasks.complete(conn, p.namespace_id, task_id, body["epoch"], body["output"])
    _forget(task_id)
    return done(f"Task {task_id} completed ({t['state']}).", "console.tasks_page")


@bp.post("/tasks/<task_id>/fail")
@page(Scope.TASKS_WORK)
def task_fail(task_id: str) -> Response:
    err = {"message": request.form.get("message", ""), "retryable": request.form.get("retryable") == "yes"}
    body = schemas.load(FailRequest(), {"epoch": _epoch(task_id), "error": err})
    p = principal()
    with transaction() as conn:
        task_in_scope(conn, task_id)
        t = tasks.fail(conn, p.namespace_id, task_id, body["epoch"], dict(body["error"]))
    _forget(task_id)
    return done(f"Task {task_id} failed ({t['state']}).", "console.tasks_page")
