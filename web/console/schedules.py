"""Schedule pages (X-SCHED): the namespace's schedules with their next fire times, one schedule with its
next five fire times and its latest fires (launched or skipped, and why), pause / resume / launch now
with a reason and a confirmation, and the edit form. Validation and the writes are the API's own
(``schemas.schedules``, ``app.integrations.schedules``, audited there); the scopes are
the API's: reads ``workflows:read``, writes ``workflows:start`` (plus the queue rules of a start)."""

from __future__ import annotations

from typing import Any

from flask import Response, render_template, request

import schemas
from app.auth import Scope
from app.db import transaction
from app.engine import lookup
from app.errors import InvalidArgument
from app.integrations import schedules
from app.integrations.schedule_models import OVERLAP_POLICIES
from schemas.schedules import ScheduleActionRequest, UpdateScheduleRequest
from web.console.common import (
    bp,
    clean_args,
    done,
    in_place,
    json_field,
    page,
    pager,
    principal,
    read,
    require_confirmation,
)
from web.engine_common import start_queue_check
from web.http import request_id

READ, WRITE = Scope.WORKFLOWS_READ, Scope.WORKFLOWS_START
PAGE_SIZE = 50
FIRES = 50
EDIT_FIELDS = ("version", "cron", "timezone", "interval_seconds", "overlap", "fire_time_field", "input")


@bp.get("/schedules", endpoint="schedules")
@page(READ)
def schedules_list() -> str:
    ns = principal().namespace_id
    cursor = request.args.get("cursor") or None

    def load(c: Any) -> tuple[dict[str, Any], dict[str, str]]:
        page_ = schedules.list_schedules(c, ns, PAGE_SIZE, cursor)
        return page_, lookup.definition_names(c, (s["definition_id"] for s in page_["items"]))

    data, names = read(load)
    return render_template(
        "console/schedules.html",
        items=data["items"],
        names=names,
        pages=pager(request.args, data.get("next_cursor"), len(data["items"]), PAGE_SIZE),
    )


def _schedule_page(schedule_id: str) -> str:
    ns = principal().namespace_id

    def load(c: Any) -> dict[str, Any]:
        s = schedules.get_schedule(c, ns, schedule_id)
        return {
            "s": s,
            "fires": schedules.list_fires(c, ns, schedule_id, FIRES)["items"],
            "names": lookup.definition_names(c, [s["definition_id"]]),
        }

    return render_template("console/schedule.html", **read(load), overlaps=OVERLAP_POLICIES)


@bp.get("/schedules/<schedule_id>")
@page(READ)
def schedule(schedule_id: str) -> str:
    return _schedule_page(schedule_id)


def _act(schedule_id: str, name: str, verb: str, fn: Any) -> Response:
    def work() -> Response:
        body = schemas.load(
            ScheduleActionRequest(), {"reason": request.form.get("reason", "").strip() or None}
        )
        if not body.get("reason"):
            raise InvalidArgument("say why (it is written to the audit)", field="reason")
        require_confirmation(request.form)
        with transaction() as conn:
            message = fn(conn, body["reason"])
        return done(f"{verb}: {message}", "console.schedule", schedule_id=schedule_id)

    return in_place(name, ("reason", "confirm"), work, lambda: _schedule_page(schedule_id))


@bp.post("/schedules/<schedule_id>/pause")
@page(WRITE)
def schedule_pause(schedule_id: str) -> Response:
    def fn(conn: Any, reason: str) -> str:
        schedules.set_paused(conn, principal(), schedule_id, True, request_id=request_id(), reason=reason)
        return "no fire until it is resumed"

    return _act(schedule_id, "pause", "Paused", fn)


@bp.post("/schedules/<schedule_id>/resume")
@page(WRITE)
def schedule_resume(schedule_id: str) -> Response:
    def fn(conn: Any, reason: str) -> str:
        out = schedules.set_paused(
            conn, principal(), schedule_id, False, request_id=request_id(), reason=reason
        )
        missed = out["missed"]
        nxt = out["schedule"]["next_fire_at"]
        if missed:
            return f"{missed['fire_times']} fire time(s) missed while paused, coalesced into one launch now"
        return f"next fire at {nxt}"

    return _act(schedule_id, "resume", "Resumed", fn)


@bp.post("/schedules/<schedule_id>/launch")
@page(WRITE)
def schedule_launch(schedule_id: str) -> Response:
    def fn(conn: Any, reason: str) -> str:
        out = schedules.launch_now(conn, principal(), schedule_id, request_id=request_id(), reason=reason)
        return f"a manual fire at {out['fire_at']} (ledger job {out['job_id']})"

    return _act(schedule_id, "launch", "Launched", fn)


@bp.post("/schedules/<schedule_id>/edit")
@page(WRITE)
def schedule_edit(schedule_id: str) -> Response:
    def work() -> Response:
        form = request.form
        raw: dict[str, Any] = {
            k: v
            for k, v in clean_args(form, ints=("interval_seconds",)).items()
            if k in EDIT_FIELDS and k != "input"
        }
        rule = form.get("rule")
        if rule == "cron":
            raw.pop("interval_seconds", None)
            raw.setdefault("cron", "")
        elif rule == "interval":
            raw.pop("cron", None)
        if "fire_time_field" not in raw:
            raw["fire_time_field"] = None
        raw["input"] = json_field(form.get("input"), "input")
        changes = schemas.load(UpdateScheduleRequest(), raw)
        require_confirmation(form)
        p = principal()
        with transaction() as conn:
            view = schedules.update_schedule(
                conn, p, schedule_id, changes, request_id=request_id(), check_queues=start_queue_check(p)
            )
        return done(
            f"Schedule {view['name']} changed: next fire at {view['next_fire_at']}.",
            "console.schedule",
            schedule_id=schedule_id,
        )

    return in_place("edit", (*EDIT_FIELDS, "rule", "confirm"), work, lambda: _schedule_page(schedule_id))
