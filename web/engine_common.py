"""Helpers shared by the engine blueprints (definitions, workflows, tasks): idempotent creates that
answer 201 first and 200 with ``deduplicated: true`` on a replay of the stored receipt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Response, request
from sqlalchemy import Connection

from app import idempotency, jsonx
from app.auth import Principal
from app.engine.store import read_instance
from app.errors import NotFound
from app.ids import is_hex32
from web.auth import current_principal
from web.http import json_response, raw_json_response, request_id
from web.strict import read_json_body


def idempotent(work: Callable[[Connection], tuple[int, Any]], *, created: bool = True) -> Response:
    """Run ``work`` once per (namespace, route, Idempotency-Key). A replay returns the stored body
    (the first-acceptance snapshot) with 200, this request's id and ``deduplicated: true``."""
    principal = current_principal()
    key = idempotency.validate_key(request.headers.get("Idempotency-Key"))
    raw = read_json_body()
    route = f"{request.method} {request.path}"
    fp = idempotency.fingerprint(request.method, request.path, raw)
    stored = idempotency.execute_once(scope=principal.namespace_id, route=route, key=key, fp=fp, work=work)
    if not stored.replayed:
        return raw_json_response(stored.body, stored.status)
    body = jsonx.loads(stored.body)
    body["request_id"] = request_id()
    if isinstance(body.get("data"), dict) and "deduplicated" in body["data"]:
        body["data"]["deduplicated"] = True
    status = 200 if stored.status == 201 or not created else stored.status
    return json_response(body, status, {"Idempotent-Replayed": "true"})


def ok(data: Any, status: int = 200) -> Response:
    return json_response({"request_id": request_id(), "data": data}, status)


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
