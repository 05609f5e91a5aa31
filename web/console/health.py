"""Engine health (the seed's engine diagnostics, SPEC L-STATUS / L-PAUSE-5) and the charts page.

Directed recovery: each action's page shows what it would change (a read) and applies only with a
reason and a confirmation; the application writes an audit row (``engine.*``) with the preview it was
shown and what it did."""

from __future__ import annotations

from typing import Any

from flask import Response, render_template, request

import web.strict as strict
from app import audit
from app.auth import Scope
from app.config import get_settings
from app.db import get_engine, transaction
from app.engine.tasks import return_expired_leases
from app.errors import NotFound, StateConflict
from app.ledger import drain, hints, nodes, status, transitions
from app.observability import metrics
from web.console.charts import hour_totals, line_chart
from web.console.common import bp, done, page, platform_view, pool_name, principal, read, require_confirmation
from web.http import request_id
from web.jobs_schemas import SkipBody

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
    return render_template("console/health.html", **read(_health))


def _confirmed() -> tuple[str, dict[str, Any]]:
    """The reason (the ledger API's rule: SkipBody carries only a reason) and the confirmation of a
    health action, and the preview it is applied against."""
    reason = strict.load(SkipBody(), {"reason": request.form.get("reason", "")})["reason"]
    require_confirmation(request.form)
    return reason, read(status.drain_preview)


def _audit(action: str, reason: str, before: Any, after: Any) -> None:
    with transaction() as conn:
        audit.record(conn, principal=principal(), request_id=request_id(), action=action, target_type="engine",
                     target_id=action.split(".", 1)[1], reason=reason, before=before, after=after)  # fmt: skip


def _preview_summary(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "stuck": p["stuck"],
        "stuck_ids": [r["id"] for r in p["stuck_sample"]],
        "due_by_queue": p["due_by_queue"],
    }


@bp.post("/health/drain")
@page(OPERATE)
def run_drain() -> Response:
    platform_view()
    reason, before = _confirmed()
    report = drain.drain(get_engine(), get_settings(), sweeps=[("task_leases", return_expired_leases)])
    after = {
        "ran": report.ran,
        "reclaimed_to_pending": report.to_pending,
        "reclaimed_to_dead": report.to_dead,
        "reclaimed_ids": [str(r["id"]) for r in report.reclaimed[:100]],
        "swept": report.swept,
        "hinted_queues": report.hinted_queues,
    }
    _audit("engine.drain", reason, _preview_summary(before), after)
    if not report.ran:
        return done(
            "The drain is running elsewhere right now (its lock is held); nothing done here.",
            "console.health",
        )
    return done(f"Drain ran: {report.to_pending} job(s) back to pending, {report.to_dead} dead, "
                f"hints for {', '.join(report.hinted_queues) or 'no queue'}.", "console.health")  # fmt: skip


@bp.post("/health/hints")
@page(OPERATE)
def publish_hints() -> Response:
    platform_view()
    reason, before = _confirmed()
    queues = sorted(before["due_by_queue"])
    sent = {q: hints.publish_now(q) for q in queues}
    _audit("engine.republish_hints", reason, {"due_by_queue": before["due_by_queue"]}, {"published": sent})
    return done(
        f"Wake hints re-published for {', '.join(queues) or 'no queue (nothing is due)'}.", "console.health"
    )


@bp.get("/health/nodes/<node_id>")
@page(MONITOR)
def node(node_id: str) -> str:
    platform_view()
    detail = read(lambda c: nodes.node_detail(c, node_id[:64]))
    if detail is None:
        raise NotFound("no such worker node")
    return render_template("console/node.html", node=detail)


@bp.post("/health/nodes/<node_id>/reclaim")
@page(OPERATE)
def reclaim_node(node_id: str) -> Response:
    platform_view()
    reason, _ = _confirmed()
    settings = get_settings()
    with transaction() as conn:
        before = nodes.node_detail(conn, node_id[:64])
        if before is None:
            raise NotFound("no such worker node")
        if before["live"]:
            raise StateConflict("this node is live (a heartbeat within 90 s): its jobs are not reclaimed")
        moved = transitions.reclaim_lost_node(
            conn, node_id, limit=settings.drain_batch, backoff_base=settings.backoff_base_seconds,
            backoff_cap=settings.backoff_cap_seconds,
        )  # fmt: skip
        audit.record(conn, principal=principal(), request_id=request_id(), action="engine.reclaim_node",
                     target_type="worker_node", target_id=node_id, reason=reason,
                     before={"running_jobs": [j["id"] for j in before["running_jobs"]]},
                     after={"reclaimed": [{"id": str(m["id"]), "status": m["status"]} for m in moved]})  # fmt: skip
    return done(f"Reclaimed {len(moved)} job(s) of node {node_id}.", "console.node", node_id=node_id)


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
            unit="", percent=True,
        )  # fmt: skip
        charts_.append({"pool": pool_name(pool), "wait": wait, "throughput": throughput, "failure": failure,
                        "hour": hour_totals(series)})  # fmt: skip
    return render_template("console/charts.html", charts=charts_, bucket=data["bucket_seconds"], panel=panel)
