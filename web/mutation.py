"""Idempotent mutations (SPEC W-API-2): ``@mutation`` declares the required ``Idempotency-Key`` header;
``run_once(work)`` runs ``work(conn)`` in one transaction with the receipt and replays stored
responses. Audit rows written by ``work`` share that transaction."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flask import Response, request
from sqlalchemy import Connection

from app import idempotency
from web.auth import current_principal
from web.http import raw_json_response
from web.meta import meta
from web.strict import read_json_body

REPLAYED_HEADER = "Idempotent-Replayed"


def mutation(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Require a valid ``Idempotency-Key`` header (checked after authentication, before the body)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        idempotency.validate_key(request.headers.get("Idempotency-Key"))
        return fn(*args, **kwargs)

    meta(wrapper)["idempotency_key"] = True
    return wrapper


def run_once(
    work: Callable[[Connection], tuple[int, Any]],
    *,
    replay_status: Callable[[int], int] | None = None,
) -> Response:
    """Execute ``work`` once for (namespace, method + path, Idempotency-Key).

    Same key + same body → the stored response (``Idempotent-Replayed: true``; ``replay_status`` may
    map the stored status, e.g. 201 → 200 per W-API-3); same key + other body → 409
    IDEMPOTENCY_CONFLICT."""
    principal = current_principal()
    key = idempotency.validate_key(request.headers.get("Idempotency-Key"))
    raw = read_json_body()
    route = f"{request.method} {request.path}"
    fp = idempotency.fingerprint(request.method, request.path, raw)
    stored = idempotency.execute_once(scope=principal.namespace_id, route=route, key=key, fp=fp, work=work)
    status = stored.status
    headers = {}
    if stored.replayed:
        headers[REPLAYED_HEADER] = "true"
        if replay_status is not None:
            status = replay_status(status)
    return raw_json_response(stored.body, status, headers)
