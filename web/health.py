"""/healthz (process up) and /readyz (Postgres reachable; Redis reported, not required)."""

from __future__ import annotations

import redis
from flask import Blueprint, jsonify
from sqlalchemy import text

from app.config import get_settings
from app.db import get_engine
from web.auth import public
from web.meta import doc

bp = Blueprint("health", __name__)


@bp.get("/healthz")
@public
@doc(summary="Process is up", tags=["health"])
def healthz():  # noqa: ANN201
    return jsonify({"status": "ok"})


@bp.get("/readyz")
@public
@doc(summary="PostgreSQL reachable (Redis reported)", tags=["health"], errors=(503,))
def readyz():  # noqa: ANN201
    body: dict[str, object] = {}
    try:
        with get_engine().connect() as conn:
            conn.execute(text("SELECT 1"))
        body["postgres"] = "ok"
    except Exception:  # noqa: BLE001
        body["postgres"] = "unreachable"
    redis_url = get_settings().redis_url
    if not redis_url:
        body["redis"] = "not configured (pools poll every 2 s)"
    else:
        try:
            redis.Redis.from_url(redis_url, socket_connect_timeout=1, socket_timeout=1).ping()
            body["redis"] = "ok"
        except redis.RedisError:
            body["redis"] = "unreachable (pools poll every 2 s)"
    ready = body["postgres"] == "ok"
    body["status"] = "ready" if ready else "not ready"
    return jsonify(body), (200 if ready else 503)
