"""/healthz (process up) and /readyz (Postgres reachable; Redis reported, not required)."""

from __future__ import annotations

import redis
from flask import Blueprint, jsonify

from app.db import get_engine
from app.sql import query, run
from web.auth import public
from web.meta import doc
from web.ratelimit import redis_client

bp = Blueprint("health", __name__)


@bp.get("/healthz")
@public
@doc(summary="Process is up", tags=["health"])
def healthz():
    return jsonify({"status": "ok"})


_HEALTH_PING = query(
    "health_ping",
    "SELECT 1",
)


@bp.get("/readyz")
@public
@doc(summary="PostgreSQL reachable (Redis reported)", tags=["health"], errors=(503,))
def readyz():
    body: dict[str, object] = {}
    try:
        with get_engine().connect() as conn:
            run(conn, _HEALTH_PING)
        body["postgres"] = "ok"
    except Exception:
        body["postgres"] = "unreachable"
    client = redis_client()  # the process's client (1 s timeouts), not a new connection per probe
    if client is None:
        body["redis"] = "not configured (pools poll every 2 s)"
    else:
        try:
            client.ping()
            body["redis"] = "ok"
        except redis.RedisError:
            body["redis"] = "unreachable (pools poll every 2 s)"
    ready = body["postgres"] == "ok"
    body["status"] = "ready" if ready else "not ready"
    return jsonify(body), (200 if ready else 503)
