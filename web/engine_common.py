"""Helpers shared by the workflow blueprints and the console: the instance and task lookups of W-API-1
and X-TASK for the calling principal, the queue rules and the audit entry of a start."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection

from app.auth import Principal, Scope, missing_permission_message
from app.engine import audit_entries, instances, task_protocol
from app.engine.operator_commands import check_queue_scope, visible_instance
from app.errors import PermissionDenied
from web.auth import current_principal


def load_instance(conn: Connection, instance_id: str) -> dict:
    """W-API-1: an instance of the caller's namespace whose pinned definition's queues are all in
    the credential's scope; anything else is 404."""
    return visible_instance(conn, current_principal(), instance_id)


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
    """The ``on_created`` of a start (``instances.start_workflow``): its ``workflow.start`` audit entry,
    written with the start's event batch (no ``operation_audit`` row), made as soon as the instance row
    exists, so it precedes the audit entries of its first activations."""

    def record(conn: Connection, created: dict) -> None:
        audit_entries.started(
            conn, principal, created["id"], instances.instance_view(created), request_id=request_id
        )

    return record


def task_in_scope(conn: Connection, task_id: str) -> dict:
    """X-TASK: a task of the caller's namespace on a queue in the credential's scope; else 404."""
    principal = current_principal()
    task = task_protocol.read_task(conn, task_id, principal.namespace_id)
    check_queue_scope(principal, [task["queue"]])
    return task
