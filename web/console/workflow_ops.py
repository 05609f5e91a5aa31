"""Operator actions on workflows in the console (issue 47): rerun a FAILED or CANCELLED workflow, act on a
selection of the list or on everything its filters match (with a preview first), and the failure groups
page with "rerun this group". The same domain commands as the API (``app.engine.rerun``, ``batch``,
``failure_groups``), validated by the API's own schemas."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode

from flask import Response, flash, redirect, render_template, request, url_for
from werkzeug.datastructures import MultiDict

import schemas
from app.auth import Scope
from app.db import transaction
from app.engine import batch, failure_groups, rerun
from app.errors import InvalidArgument
from schemas.workflow_ops import BatchRequest, GroupsQuery, RerunRequest
from web.console.common import (
    bp,
    clean_args,
    done,
    in_place,
    page,
    principal,
    read,
    require_confirmation,
    rfc3339_of_local,
)
from web.console.workflows import LIST_FIELDS, TIME_FIELDS, _workflow_page, workflows
from web.http import request_id

BATCH_FIELDS = ("action", "ids", "scope", "from_step", "reason", "confirm")


@bp.post("/workflows/<instance_id>/rerun")
@page(Scope.WORKFLOWS_CONTROL)
def workflow_rerun(instance_id: str) -> Response:
    form = request.form

    def work() -> Response:
        raw = {k: form[k].strip() for k in ("from_step", "version", "reason") if form.get(k, "").strip()}
        raw.setdefault("reason", form.get("reason", ""))
        req = schemas.load(RerunRequest(), raw)
        require_confirmation(form)
        with transaction() as conn:
            out = rerun.rerun_workflow(conn, principal(), instance_id, req, request_id=request_id())
        return _to_new(out)

    return in_place(
        "rerun", ("from_step", "version", "reason", "confirm"), work, lambda: _workflow_page(instance_id)
    )


def _to_new(out: dict[str, Any]) -> Response:
    """After a rerun: the new workflow's page (not the form's page: the old workflow)."""
    copied = ", ".join(out["copied_steps"]) or "none"
    flash(
        f"Rerun started: workflow {out['instance']['id'][:8]} is {out['instance']['state']}; copied steps: {copied}."
    )
    return redirect(url_for("console.workflow", instance_id=out["instance"]["id"]))  # type: ignore[return-value]


def _filters(filter_qs: str) -> dict[str, Any]:
    """The list's filters of a filter query string (the list page's own), as the batch's ``filter``."""
    args = MultiDict(parse_qsl(filter_qs))
    raw = {k: v for k, v in clean_args(args).items() if k in LIST_FIELDS}
    return {k: (rfc3339_of_local(v) if k in TIME_FIELDS else v) for k, v in raw.items()}


def _batch_request(form: MultiDict[str, str], *, preview: bool) -> dict[str, Any]:
    action = (form.get("action") or "").upper()
    raw: dict[str, Any] = {"action": action, "reason": form.get("reason", ""), "preview": preview}
    if form.get("scope") == "all":
        raw["filter"] = _filters(form.get("filter_qs", ""))
    else:
        ids = [i for i in form.getlist("ids") if i.strip()]
        if not ids:
            raise InvalidArgument("select at least one workflow (or all matching the filters)", field="ids")
        raw["ids"] = ids
    if action == "RERUN" and form.get("from_step", "").strip():
        raw["from_step"] = form["from_step"].strip()
    return schemas.load(BatchRequest(), raw)


@bp.post("/workflows/batch")
@page(Scope.WORKFLOWS_CONTROL)
def workflows_batch() -> Response | str:
    form = request.form
    preview = form.get("do") == "preview"

    def work() -> Any:
        req = _batch_request(form, preview=preview)
        if preview:
            out = read(lambda c: batch.batch(c, principal(), req, request_id=request_id()))
            return render_template(
                "console/workflow_batch.html",
                out=out,
                form=form,
                ids=req.get("ids", []),
                filter_qs=form.get("filter_qs", ""),
                scope=form.get("scope", "selected"),
                filters=req.get("filter", {}),
            )
        require_confirmation(form)
        with transaction() as conn:
            out = batch.batch(conn, principal(), req, request_id=request_id())
        more = f", {out['remaining']} more match (run it again)" if out["remaining"] else ""
        return done(
            f"{out['action'].capitalize()}: acted on {out['submitted']} workflow(s); {out['skipped_for_state']} "
            f"skipped for their state, {out['not_found']} not found{more}.",
            "console.workflows",
        )

    return in_place("batch", BATCH_FIELDS, work, lambda: workflows()[0])


@bp.get("/workflows/failure-groups")
@page(Scope.WORKFLOWS_READ)
def workflow_failure_groups() -> str:
    q = schemas.load(
        GroupsQuery(), {k: v for k, v in clean_args(request.args).items() if k in ("definition_id", "limit")}
    )
    p = principal()
    data = read(
        lambda c: failure_groups.groups(
            c, p.namespace_id, p.queues, definition_id=q.get("definition_id"), limit=q["limit"]
        )
    )
    for grp in data["groups"]:
        grp["list_url"] = url_for("console.workflows", **grp["filter"])
        grp["rerun_qs"] = urlencode(grp["rerun_filter"])
    return render_template("console/failure_groups.html", **data)
