"""Workflow pages (W-START-4, W-STEP, W-CTL, X-RECOVER, X-HIST, X-EVENT): the list with filters, totals
and paging; the workflow page that answers "what happened and why" (definition name and version, input,
output, the failure and the step it came from, steps in graph order with their timing, a timeline and
the graph in SVG, events, signals and the audit timeline with "older" paging); a step's history; control
and recovery with reason and confirmation.

Scopes are the API's (``workflows:read`` and the action's own). A platform-wide operator also reads the
workflows of every namespace (the namespace switcher; its ledger view already spans them, so no link it
is shown leads to a 404); acting on a workflow stays with credentials of the workflow's namespace."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from flask import Response, g, render_template, request
from sqlalchemy import Connection
from werkzeug.datastructures import MultiDict

import schemas
from app import audit, settings
from app.auth import Scope
from app.db import transaction
from app.engine import history, instances, lookup, operator_commands, overview, rerun_links, signals, traces
from app.engine.control import OPERATIONS
from app.engine.operator_commands import check_queue_scope
from app.engine.recovery import RESOLUTIONS
from app.engine.row_access import MISSING
from app.engine.states import TERMINAL
from app.errors import InvalidArgument, NotFound
from schemas.workflow_control import ControlRequest
from schemas.workflow_history import RecoveryRequest
from schemas.workflows import ListQuery
from web.console.common import (
    FormState,
    bp,
    can,
    clean_args,
    done,
    in_place,
    json_field,
    page,
    pager,
    principal,
    read,
    require_confirmation,
    rfc3339_of_local,
)
from web.console.diagrams import graph, timeline
from web.http import request_id

READ = Scope.WORKFLOWS_READ
PAGE_SIZE = 50
COUNT_CAP = 10_000
HISTORY_PAGE = 20
EVENTS_PAGE = 50
LIST_FIELDS = (
    "state",
    "paused",
    "definition_id",
    "version",
    "business_key",
    "business_key_prefix",
    "id_prefix",
    "failed_step",
    "error_code",
    "error_group",
    "created_after",
    "created_before",
    "schedule_id",
)
TIME_FIELDS = ("created_after", "created_before")
STEP_ACTIONS = ("RETRY_STEP", "SUCCEED_STEP", "FAIL_STEP")


# --------------------------------------------------------------------------- whose workflows
def viewed_namespace(conn: Connection) -> dict[str, str]:
    """The namespace whose workflows / tasks a page shows: the credential's own, or for a
    platform-wide operator the one chosen with ``?ns=<name>`` (the switcher)."""
    p = principal()
    wanted = request.args.get("ns")
    if not wanted or wanted == p.namespace:
        return {"id": p.namespace_id, "name": p.namespace}
    if not p.platform:
        raise NotFound("no such namespace")
    return lookup.namespace_by_name(conn, wanted)


def switcher(conn: Connection) -> list[dict[str, str]] | None:
    """The namespaces a platform-wide operator may switch between (None: no switcher)."""
    return lookup.namespaces(conn) if principal().platform else None


def readable_instance(conn: Connection, instance_id: str) -> dict[str, Any]:
    """An instance this credential may read (W-API-1; a platform-wide operator: of any namespace)."""
    p = principal()
    inst = lookup.instance_for(conn, instance_id, None if p.platform else p.namespace_id)
    if not p.platform:
        check_queue_scope(p, list(inst["queues"]))
    return inst


def acts_here(inst: dict[str, Any]) -> bool:
    """Actions on a workflow are offered (and allowed) in its own namespace only, as in the API."""
    return inst["namespace_id"] == principal().namespace_id


# --------------------------------------------------------------------------- list
DEFINITION_FIELD = (
    "definition"  # the list's filter by definition: a name (or an id), from a datalist of names
)
MAX_DEFINITION_FIELD = 128  # a definition name's length (an id is 32)


def timing(item: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A list row's end and duration: ``ended`` (when it ended, None while unfinished), ``duration_s``
    (created to ended, or to now while unfinished) and ``running`` (unfinished)."""
    created = _utc(item["created_at"])
    ended = _utc(item["completed_at"]) if item.get("completed_at") else None
    unfinished = item["state"] not in TERMINAL
    end = now if unfinished or ended is None else ended
    return {
        "ended": None if unfinished else ended,
        "duration_s": max(0.0, (end - created).total_seconds()) if (unfinished or ended) else None,
        "running": unfinished,
    }


@bp.get("/workflows")
@page(READ)
def workflows() -> tuple[str, int]:
    args = clean_args(request.args)
    raw = {k: v for k, v in args.items() if k in LIST_FIELDS}
    chosen = args.get(DEFINITION_FIELD) if isinstance(args.get(DEFINITION_FIELD), str) else None
    cursor = request.args.get("cursor")
    p = principal()

    def refuse(exc: InvalidArgument) -> None:
        # the form has one definition field (a name or an id): an error of definition_id is shown there
        errors: dict[str, list[str]] = {}
        for e in exc.field_errors:
            errors.setdefault(DEFINITION_FIELD if e.field == "definition_id" else e.field, []).append(
                e.message
            )
        g.form = FormState("filters", MultiDict(request.args), errors, None if errors else exc.message)

    def load(c: Connection) -> dict[str, Any]:
        ns = viewed_namespace(c)
        queues = None if ns["id"] != p.namespace_id else p.queues
        out: dict[str, Any] = {"ns": ns, "namespaces": switcher(c), "items": [], "next": None, "total": 0}
        # the filter's choices; the live refresh swaps the list alone (hx-select), so it reads none
        refresh = request.headers.get("HX-Request") == "true"
        out["definition_names"] = [] if refresh else lookup.namespace_definition_names(c, ns["id"])
        out["status"], out["chosen"] = 200, ""
        try:
            if chosen is not None:
                if len(chosen) > MAX_DEFINITION_FIELD or "\x00" in chosen:
                    raise InvalidArgument("a definition name", field=DEFINITION_FIELD)
                found = lookup.definition_by_name_or_id(c, ns["id"], chosen)
                if found is None:
                    raise InvalidArgument(f"no definition named {chosen!r} here", field=DEFINITION_FIELD)
                if raw.get("definition_id", found["id"]) != found["id"]:
                    raise InvalidArgument(
                        "names another definition than definition_id", field=DEFINITION_FIELD
                    )
                raw["definition_id"] = found["id"]
            q = schemas.load(
                ListQuery(),
                {
                    "limit": str(PAGE_SIZE),
                    **{k: (rfc3339_of_local(v) if k in TIME_FIELDS else v) for k, v in raw.items()},
                    **({"cursor": cursor} if cursor else {}),
                },
            )
        except InvalidArgument as exc:
            refuse(exc)
            out["status"] = 400
            out["names"] = {}
            return out
        page_ = instances.list_instances(c, ns["id"], q["filters"], q["limit"], q["cursor"], queues)
        now = datetime.now(UTC)
        out.update(
            items=[{**i, **timing(i, now)} for i in page_["items"]],
            next=page_.get("next_cursor"),
            total=instances.count_instances(c, ns["id"], q["filters"], queues, COUNT_CAP),
        )
        ids = [i["definition_id"] for i in out["items"]] + [raw.get("definition_id", "")]
        out["names"] = lookup.definition_names(c, ids)
        out["chosen"] = out["names"].get(raw.get("definition_id", ""), "")
        return out

    data = read(load)
    status_code = data.pop("status")
    return render_template(
        "console/workflows.html",
        **data,
        filters=raw,
        states=instances.STATES,
        batch_max=settings.WORKFLOW_BATCH_MAX.get(),
        pages=pager(request.args, data["next"], len(data["items"]), PAGE_SIZE, data["total"], COUNT_CAP),
    ), status_code


# --------------------------------------------------------------------------- the workflow page
def _detail(conn: Connection, instance_id: str) -> dict[str, Any]:
    inst = readable_instance(conn, instance_id)
    steps = overview.steps_in_order(conn, inst)
    now = overview.db_now(conn)
    spans = overview.spans(conn, instance_id)
    ns = lookup.instance_namespaces(conn, [instance_id]).get(instance_id, {})
    out: dict[str, Any] = {
        "inst": inst,
        "instance": instances.instance_view(inst),
        "namespace": ns.get("namespace", ""),
        "definition_name": lookup.definition_names(conn, [inst["definition_id"]]).get(
            inst["definition_id"], ""
        ),
        "steps": steps,
        "failure": _why(conn, inst, steps),
        "graph": graph(steps, overview.graph_layers(steps)),
        "timeline": timeline(
            [s["key"] for s in steps],
            spans["activations"],
            spans["attempts"],
            now,
            {s["key"]: (s.get("skipped") or {}).get("code", "") for s in steps if s["state"] == "SKIPPED"},
        ),
        "spans_truncated": spans["truncated"],
        "signals": signals.list_signals(conn, inst, HISTORY_PAGE, None)["items"],
        "events": _events(conn, inst),
        "now": now,
        "has_output": inst["output"] is not MISSING,
        "acts_here": acts_here(inst),
        # issue 47: the rerun links, the copied steps, the failing attempt's trace
        "links": rerun_links.links(conn, instance_id),
        "copied": rerun_links.copied_marks(conn, instance_id),
    }
    out["trace"] = traces.failure_of_task(conn, (out["failure"] or {}).get("detail", {}).get("task_id"))
    if can(Scope.WORKFLOWS_AUDIT_READ):
        page_ = audit.list_entries(
            conn,
            inst["namespace_id"],
            workflow_id=instance_id,
            limit=HISTORY_PAGE,
            cursor=request.args.get("audit") or None,
            kind="console_workflow_audit",
        )
        out["audit"] = {"items": page_.items, "next": page_.next_cursor}
    return out


def _utc(rfc3339: str) -> datetime:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))


def _events(conn: Connection, inst: dict[str, Any]) -> dict[str, Any]:
    """A page of the workflow's events, each row readable without unfolding its body: its step, task
    and error (the task's or the activation's, ``history.event_errors``; a failed workflow's own),
    the time since the previous event (on a later page, the first row's from the page before) and
    whether its UTC date is shown (the page's first row, and where the date changes)."""
    page_ = history.events(conn, inst, EVENTS_PAGE, request.args.get("events") or None)
    errors = history.event_errors(conn, inst, page_["items"])
    prev: datetime | None = None
    if page_["items"] and page_["items"][0]["seq"] > 1:  # a later page: from the last event of the one before
        before = history.event_time(conn, inst, page_["items"][0]["seq"] - 1)
        prev = _utc(before) if before else None
    rows: list[dict[str, Any]] = []
    for e in page_["items"]:
        at = _utc(e["created_at"])
        error = errors.get(e["id"])
        if error is None and e["type"] == "workflow.failed" and inst.get("error") not in (None, MISSING):
            error = inst["error"]
        rows.append(
            {
                **e,
                "step_key": e["body"].get("step_key"),
                "task_id": e["body"].get("task_id"),
                "error": error,
                "at": at,
                "since_prev": None if prev is None else (at - prev).total_seconds(),
                "new_day": not rows or prev is None or prev.date() != at.date(),
            }
        )
        prev = at
    return {**page_, "items": rows}


def _why(conn: Connection, inst: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The failure and its step. A workflow in review waits for what the review is about (an unknown
    external outcome, a failed compensation), which is shown as the cause; the failure that began the
    stop, when there was one, is kept as ``origin``."""
    found = overview.failure(inst, steps)
    cause = overview.review_cause(conn, inst)
    if cause is None:
        return found
    origin = found if found is not None and found.get("code") and found.get("code") != cause["code"] else None
    return {
        "code": cause["code"],
        "message": cause["message"],
        "step_key": cause["step_key"] or (found or {}).get("step_key"),
        "detail": {"jobs": cause["jobs"]} if cause["jobs"] else {},
        "origin": origin,
    }


def _workflow_page(instance_id: str) -> str:
    d = read(lambda c: _detail(c, instance_id))
    in_review = [s["key"] for s in d["steps"] if s["state"] == "NEEDS_REVIEW"]
    return render_template(
        "console/workflow.html",
        **d,
        operations_list=OPERATIONS,
        resolutions=RESOLUTIONS,
        step_actions=STEP_ACTIONS,
        in_review=in_review,
        terminal=d["inst"]["state"] in TERMINAL,
    )


@bp.get("/workflows/<instance_id>")
@page(READ)
def workflow(instance_id: str) -> str:
    return _workflow_page(instance_id)


@bp.get("/workflows/<instance_id>/steps/<key>")
@page(READ)
def workflow_step(instance_id: str, key: str) -> str:
    def load(conn: Connection) -> dict[str, Any]:
        inst = readable_instance(conn, instance_id)
        steps = {s["key"]: s for s in overview.steps_in_order(conn, inst)}
        if key not in steps:
            raise NotFound("step not found")
        return {
            "instance": instances.instance_view(inst),
            "step": steps[key],
            "activations": history.activations(conn, inst, key, HISTORY_PAGE, None)["items"],
            "rounds": history.rounds(conn, inst, key, HISTORY_PAGE, None)["items"],
            "undos": overview.compensation_tasks(conn, inst["id"], key),
            "copied_from": rerun_links.copied_marks(conn, instance_id).get(key),
        }

    return render_template("console/step.html", **read(load))


# --------------------------------------------------------------------------- actions
@bp.post("/workflows/<instance_id>/control")
@page(Scope.WORKFLOWS_CONTROL)
def workflow_control(instance_id: str) -> Response:
    def work() -> Response:
        req = schemas.load(
            ControlRequest(),
            {k: request.form.get(k, "") for k in ("operation", "expected_control_revision", "reason")},
        )
        require_confirmation(request.form)
        with transaction() as conn:
            view = operator_commands.control_workflow(
                conn, principal(), instance_id, req, request_id=request_id()
            )
        paused = " (paused)" if view["paused"] else ""
        return done(
            f"{req['operation'].capitalize()} applied: {view['state']}{paused}, control revision "
            f"{view['control_revision']}.",
            "console.workflow",
            instance_id=instance_id,
        )

    return in_place(
        "control",
        ("operation", "expected_control_revision", "reason", "confirm"),
        work,
        lambda: _workflow_page(instance_id),
    )


@bp.post("/workflows/<instance_id>/recovery")
@page(Scope.WORKFLOWS_RECOVERY)
def workflow_recovery(instance_id: str) -> Response:
    form = request.form
    name = "resolve-instance" if form.get("action") == "RESOLVE_INSTANCE" else "resolve-step"

    def work() -> Response:
        raw: dict[str, Any] = {
            k: form[k]
            for k in ("action", "step_key", "resolution", "reason", "evidence_ref")
            if form.get(k, "").strip()
        }
        if raw.get("action") == "SUCCEED_STEP":
            raw["output"] = json_field(form.get("output"), "output")
        req = schemas.load(RecoveryRequest(), raw)
        require_confirmation(form)
        with transaction() as conn:
            out = operator_commands.recover_workflow(
                conn, principal(), instance_id, req, request_id=request_id()
            )
        return done(
            f"{req['action']} applied: the workflow is {out['instance']['state']}.",
            "console.workflow",
            instance_id=instance_id,
        )

    return in_place(
        name,
        ("action", "step_key", "resolution", "output", "reason", "evidence_ref", "confirm"),
        work,
        lambda: _workflow_page(instance_id),
    )
