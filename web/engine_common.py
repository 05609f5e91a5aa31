"""Helpers shared by the workflow blueprints: the queue scope of a credential and the instance lookup
of W-API-1."""

from __future__ import annotations

from sqlalchemy import Connection

from app.auth import Principal
from app.engine.store import read_instance
from app.errors import NotFound
from app.ids import is_hex32
from web.auth import current_principal


def check_queue_scope(principal: Principal, queues: list[str]) -> None:
    """W-API-1 / W-ERR: a resource on a queue outside the credential's scope is not found."""
    if any(not principal.can_use_queue(q) for q in queues):
        raise NotFound("not found")


def load_instance(conn: Connection, instance_id: str) -> dict:
    """W-API-1: an instance of the caller's namespace whose pinned definition's queues are all in
    the credential's scope; anything else is 404."""
    principal = current_principal()
    if not is_hex32(instance_id):
        raise NotFound("workflow not found")
    inst = read_instance(conn, instance_id, principal.namespace_id)
    check_queue_scope(principal, list(inst["queues"]))
    return inst
