"""The console's home: the overview of a namespace's workflows (``app.engine.summary``) — by state and
definition with links to the filtered list, the failure rate of each definition over the last hour and
day, the oldest running, the longest waiting and the open reviews — and, for a platform-wide operator,
the job ledger's status beside it."""

from __future__ import annotations

from typing import Any

from flask import render_template
from sqlalchemy import Connection

from app.auth import Scope
from app.engine import lookup, summary
from web.console.common import bp, job_scope, page, principal, read
from web.console.workflows import switcher, viewed_namespace


@bp.get("/overview")
@page(Scope.WORKFLOWS_READ)
def overview() -> str:
    p = principal()

    def load(conn: Connection) -> dict[str, Any]:
        ns = viewed_namespace(conn)
        queues = None if ns["id"] != p.namespace_id else p.queues
        out = summary.namespace_summary(conn, ns["id"], queues)
        listed = [*out["oldest_running"], *out["longest_waiting"], *out["reviews"]]
        ids = [d["definition_id"] for d in out["definitions"]] + [i["definition_id"] for i in listed]
        return {
            **out,
            "ns": ns,
            "namespaces": switcher(conn),
            "names": lookup.definition_names(conn, ids),
            # the ledger's status panel is its own request (as on the job ledger's page): the page does not wait
            "ledger_panel": p.has(Scope.ENGINE_MONITOR) and job_scope() is None,
        }

    return render_template("console/overview.html", **read(load))
