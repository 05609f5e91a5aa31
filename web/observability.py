"""The web process's observability: ``GET /metrics`` (Prometheus text format, every process's
instruments plus the ledger's facts; needs ``workflow:instance:monitor`` on a platform-wide credential), per-request metrics and an
access log line, the request context of log records, and Flask tracing when tracing is on."""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import Blueprint, Flask, Response, g, has_request_context, request

from app.auth import Scope
from app.observability import logs, metrics, tracing
from web.auth import require_platform, requires
from web.meta import doc

bp = Blueprint("observability", __name__)
access_log = logging.getLogger("ledgerflow.access")


@bp.get("/metrics")
@requires(Scope.ENGINE_MONITOR)
@doc(
    summary="Prometheus metrics of every process (text exposition format 0.0.4)",
    tags=["observability"],
    content_type="text/plain",
    description="Jobs enqueued / claimed / settled, attempt duration and queue wait, pool slots, wake "
    "hints and poll wake-ups, lease reclaims, fenced writes, drain runs, API requests, workflow starts "
    "/ ends / signals. See docs/operations.md (Metrics).",
)
def prometheus_metrics() -> Response:
    # the figures are engine-wide (every namespace's jobs and workflows): scoped like the runtime status
    require_platform("/metrics")
    body, content_type = metrics.render()
    return Response(body, status=200, content_type=content_type)


def _request_fields() -> dict[str, Any] | None:
    if not has_request_context():
        return None
    principal = g.get("principal")
    view_args = request.view_args or {}
    return {
        "request_id": g.get("request_id"),
        "namespace": principal.namespace if principal is not None else None,
        "instance_id": view_args.get("instance_id"),
    }


def install(app: Flask) -> None:
    """Request metrics + access log (after the request id hook), log context, tracing."""
    logs.add_context_provider(_request_fields)

    @app.before_request
    def _started() -> None:
        g.started_at = time.perf_counter()

    @app.after_request
    def _observe(resp: Response) -> Response:
        started = g.get("started_at")
        if started is None:
            return resp
        seconds = time.perf_counter() - started
        route = request.url_rule.rule if request.url_rule is not None else "<unmatched>"
        metrics.api_request(route, request.method, resp.status_code, seconds)
        access_log.info(
            "%s %s %s %.1fms",
            request.method,
            request.path,
            resp.status_code,
            seconds * 1000,
            extra={
                "route": route,
                "method": request.method,
                "status": resp.status_code,
                "duration_ms": round(seconds * 1000, 3),
            },
        )
        return resp

    app.register_blueprint(bp)
    tracing.setup("web")  # a no-op unless OTEL_* asks for tracing (each gunicorn worker sets up its own)
    tracing.instrument_flask(app)
