"""Helpers shared by the workflow blueprints: the queue scope of a credential and the instance lookup
of W-API-1."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection

from app import audit
from app.auth import Principal, Scope, missing_permission_message
from app.engine import instances, tasks
from app.engine.store import read_instance
from app.errors import NotFound, PermissionDenied
from app.ids import is_hex32
from web.auth import current_principal


def check_queue_scope(principal: Principal, queues: list[str]) -> None:
    """W-API-1 / W-ERR: a resource on a queue outside the credential's scope is not found."""
    if any(not principal.can_use_queue(q) for q in queues):
        raise NotFound("not found")


def start_queue_check(principal: Principal) -> Callable[[list[str]], None]:
    """The check of a definition's task queues when this principal starts it (now or later, through a
    schedule): a definition with queues also needs ``tasks:submit`` and every queue in the scope."""

    def check(queues: list[str]) -> None:
        if queues and not principal.has(Scope.TASKS_SUBMIT):
            raise PermissionDenied(
                "this definition uses task queues: " + missing_permission_message([Scope.TASKS_SUBMIT])
            )
        check_queue_scope(principal, queues)

    return check


def start_audit(principal: Principal, request_id: str) -> Callable[[Connection, dict], None]:
    """The ``on_created`` of a start (``instances.start_workflow``): its ``workflow.start`` audit row,
    written as soon as the instance row exists, so it precedes the audit of its first activations."""

    def record(conn: Connection, created: dict) -> None:
        audit.record(
            conn,
            principal=principal,
            request_id=request_id,
            action="workflow.start",
            target_type="workflow",
            target_id=created["id"],
            workflow_id=created["id"],
            after=instances.instance_view(created),
        )

    return record


def load_instance(conn: Connection, instance_id: str) -> dict:
    """W-API-1: an instance of the caller's namespace whose pinned definition's queues are all in
    the credential's scope; anything else is 404."""
    principal = current_principal()
    if not is_hex32(instance_id):
        raise NotFound("workflow not found")
    inst = read_instance(conn, instance_id, principal.namespace_id)
    check_queue_scope(principal, list(inst["queues"]))
    return inst


def task_in_scope(conn: Connection, task_id: str) -> dict:
    """X-TASK: a task of the caller's namespace on a queue in the credential's scope; else 404."""
    principal = current_principal()
    task = tasks.read_task(conn, task_id, principal.namespace_id)
    check_queue_scope(principal, [task["queue"]])
    return task
