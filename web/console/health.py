"""Engine health (the seed's engine diagnostics, SPEC L-STATUS / L-PAUSE-5) and the charts page.

Directed recovery: each action's page shows what it would change (a read) and applies only with a
reason and a confirmation; the application is the operator command of ``app.engine.operator_commands``, which
writes an audit row (``engine.*``) with the preview it ran against and what it did."""

from __future__ import annotations

from typing import Any

from flask import Response, render_template, request

import schemas
from app.auth import Scope
from app.db import transaction
from app.engine import operator_commands
from app.errors import NotFound
from app.ledger import nodes, status
from app.observability import metrics
from schemas.jobs import SkipBody
from web.console.charts import hour_totals, line_chart
from web.console.common import (
    bp,
    done,
    in_place,
    page,
    platform_view,
    pool_name,
    principal,
    read,
    require_confirmation,
)
from web.http import request_id

MONITOR, OPERATE = Scope.ENGINE_MONITOR, Scope.ENGINE_OPERATE


def _health(conn: Any) -> dict[str, Any]:
    return {
        "activity": metrics.engine_activity(),
        "panel": status.runtime_status(conn),
        "nodes": nodes.list_nodes(conn, limit=100),
        "preview": status.drain_preview(conn),
    }


@bp.get("/health")
@page(MONITOR)
def health() -> str:
    platform_view()
    return _health_page()


def _reason() -> str:
    """The reason (the ledger API's rule: SkipBody carries only a reason) and the confirmation of a
    health action."""
    reason = schemas.load(SkipBody(), {"reason": request.form.get("reason", "")})["reason"]
    require_confirmation(request.form)
    return reason


def _health_page() -> str:
    return render_template("console/health.html", **read(_health))


@bp.post("/health/drain")
@page(OPERATE)
def run_drain() -> Response:
    platform_view()

    def work() -> Response:
        out = operator_commands.drain_now(principal(), _reason(), request_id=request_id())
        if not out["ran"]:
            return done(
                "The drain is running elsewhere right now (its lock is held); nothing done here.",
                "console.health",
            )
        hinted = ", ".join(pool_name(q) for q in out["hinted_queues"]) or "no pool"
        message = (
            f"Drain ran: {out['reclaimed_to_pending']} job(s) back to pending, {out['reclaimed_to_dead']} dead, "
            f"hints for {hinted}."
        )
        return done(message, "console.health")

    return in_place("drain", ("reason", "confirm"), work, _health_page)


@bp.post("/health/hints")
@page(OPERATE)
def publish_hints() -> Response:
    platform_view()

    def work() -> Response:
        queues = list(
            operator_commands.republish_hints(principal(), _reason(), request_id=request_id())["published"]
        )
        pools = ", ".join(pool_name(q) for q in queues) or "no pool (nothing is due)"
        return done(f"Wake hints re-published for {pools}.", "console.health")

    return in_place("hints", ("reason", "confirm"), work, _health_page)


def _node_page(node_id: str) -> str:
    detail = read(lambda c: nodes.node_detail(c, node_id[:64]))
    if detail is None:
        raise NotFound("no such worker node")
    return render_template("console/node.html", node=detail)


@bp.get("/health/nodes/<node_id>")
@page(MONITOR)
def node(node_id: str) -> str:
    platform_view()
    return _node_page(node_id)


@bp.post("/health/nodes/<node_id>/reclaim")
@page(OPERATE)
def reclaim_node(node_id: str) -> Response:
    platform_view()

    def work() -> Response:
        reason = _reason()
        with transaction() as conn:
            out = operator_commands.reclaim_node(conn, principal(), node_id, reason, request_id=request_id())
        return done(
            f"Reclaimed {len(out['reclaimed'])} job(s) of node {node_id}.", "console.node", node_id=node_id
        )

    return in_place("reclaim", ("reason", "confirm"), work, lambda: _node_page(node_id))


@bp.get("/charts")
@page(MONITOR)
def charts() -> str:
    platform_view()
    data, panel = read(lambda c: (status.hour_series(c), status.runtime_status(c)))
    charts_: list[dict[str, Any]] = []
    for pool, series in data["pools"].items():
        wait = line_chart({"P95": [b["p95"] for b in series], "P99": [b["p99"] for b in series]}, unit="s")
        throughput = line_chart({"attempts": [b["attempts"] for b in series]}, unit="")
        failure = line_chart(
            {"failure rate": [(b["failed"] / b["attempts"]) if b["attempts"] else None for b in series]},
            unit="",
            percent=True,
        )
        charts_.append(
            {
                "pool": pool_name(pool),
                "wait": wait,
                "throughput": throughput,
                "failure": failure,
                "hour": hour_totals(series),
            }
        )
    return render_template("console/charts.html", charts=charts_, bucket=data["bucket_seconds"], panel=panel)
