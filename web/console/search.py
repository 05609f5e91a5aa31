"""Search from every page: a job id, a workflow id, a business key or a trace id (and a definition,
schedule, subscription or rule id), each looked up exactly within what the credential may read, as its
API would answer. One hit opens its page; several are listed (a business key may name several
workflows); none says so."""

from __future__ import annotations

from typing import Any

from flask import Response, redirect, render_template, request, url_for

from app.auth import Scope
from app.engine import finding, lookup
from app.errors import NotFound
from app.ids import is_hex32
from app.integrations import automation, schedules, subscriptions
from web.console.common import bp, can, principal, read, session_only

MAX_TERM = 256


def _reach() -> lookup.Reach:
    p = principal()
    kinds = set()
    if p.has(Scope.ENGINE_MONITOR):
        kinds |= {"job", "trace"}
    if p.has(Scope.WORKFLOWS_READ):
        kinds.add("workflow")
    if p.has(Scope.DEFINITIONS_READ):
        kinds.add("definition")
    return lookup.Reach(
        frozenset(kinds), p.job_namespace, None if p.platform else p.namespace_id, p.namespace_id
    )


def _by_integration_id(conn: Any, term: str) -> list[lookup.Hit]:
    """Schedules (``workflows:read``), subscriptions and rules (``integrations:manage``) by id."""
    ns, hits = principal().namespace_id, []
    finders = []
    if can(Scope.WORKFLOWS_READ):
        finders.append(("schedule", lambda: schedules.get_schedule(conn, ns, term), "name"))
    if can(Scope.INTEGRATIONS_MANAGE):
        finders.append(("subscription", lambda: subscriptions.get(conn, ns, term), "url"))
        finders.append(("rule", lambda: automation.get_rule(conn, ns, term), "name"))
    for kind, find, label in finders:
        try:
            found = find()
        except NotFound:
            continue
        hits.append(lookup.Hit(kind, term, str(found[label])))
    return hits


def _by_prefix(conn: Any, term: str, reach: lookup.Reach) -> list[lookup.Hit]:
    """Workflows by an id prefix (8+ hex characters) or a business-key prefix in any case."""
    rows = finding.prefix_matches(
        conn, term, reach.workflow_namespace, principal().namespace_id, lookup.SEARCH_LIMIT
    )
    return [
        lookup.Hit("workflow", r["id"], f"business key {r['business_key']}", r["namespace"], r["state"])
        for r in rows
    ]


def hit_url(h: lookup.Hit) -> str:
    return {
        "job": lambda: url_for("console.job", id=h.id),
        "trace": lambda: url_for("console.chain", trace_id=h.id),
        "workflow": lambda: url_for("console.workflow", instance_id=h.id),
        "definition": lambda: url_for("console.definition", definition_id=h.id),
        "schedule": lambda: url_for("console.schedule", schedule_id=h.id),
        "subscription": lambda: url_for("console.subscription", sid=h.id),
        "rule": lambda: url_for("console.rule", rule_id=h.id),
    }[h.kind]()


@bp.get("/search")
@session_only
def search() -> Response | str:
    term = (request.args.get("q") or "").strip()[:MAX_TERM]
    hits: list[lookup.Hit] = []
    if term:
        reach = _reach()

        def load(c: Any) -> list[lookup.Hit]:
            found = lookup.search(c, term, reach)
            found += _by_integration_id(c, term) if is_hex32(term) else []
            if "workflow" in reach.kinds and not any(h.kind == "workflow" for h in found):
                found += _by_prefix(c, term, reach)  # issue 47: what operators see (8-char ids, keys)
            return found

        hits = read(load)
    if len(hits) == 1:
        return redirect(hit_url(hits[0]))  # type: ignore[return-value]  # a werkzeug Response
    return render_template("console/search.html", term=term, hits=[(h, hit_url(h)) for h in hits])
