"""The human-task page (X-TASK): the open tasks of the credential's queues (of any namespace for a
platform-wide operator, read-only outside its own), refreshing itself; claim the next task of a queue,
then complete it with a JSON output or fail it, through the task protocol's own functions."""

from __future__ import annotations

from typing import Any

from flask import Response, render_template, request, session

import schemas
from app import settings
from app.auth import Scope
from app.db import transaction
from app.engine import lookup, task_protocol
from app.engine.operator_commands import check_queue_scope
from app.errors import NotFound
from schemas.tasks import ClaimRequest, CompleteRequest, FailRequest
from web.console.common import (
    CLAIMED_KEY,
    MAX_CLAIMED,
    bp,
    can,
    done,
    in_place,
    json_field,
    page,
    principal,
    read,
)
from web.console.workflows import switcher, viewed_namespace

WORK = Scope.TASKS_WORK
PAGE_SIZE = 100
COUNT_CAP = 10_000


def _claimed() -> dict[str, int]:
    got = session.get(CLAIMED_KEY)
    return {str(k): int(v) for k, v in got.items()} if isinstance(got, dict) else {}


def _tasks_page() -> str:
    p = principal()

    def load(c: Any) -> dict[str, Any]:
        ns = viewed_namespace(c)
        queues = p.queues if ns["id"] == p.namespace_id else None
        rows = task_protocol.open_tasks(c, ns["id"], queues, PAGE_SIZE)
        return {
            "ns": ns,
            "namespaces": switcher(c),
            "rows": rows,
            "total": lookup.count_open_tasks(c, ns["id"], queues, COUNT_CAP),
        }

    data = read(load)
    own = data["ns"]["id"] == p.namespace_id
    mine = _claimed() if own else {}
    open_ = [
        task_protocol.task_view(t) | {"mine": mine.get(t["id"]) == t["epoch"] and t["state"] == "CLAIMED"}
        for t in data["rows"]
    ]
    queues = sorted({t["queue"] for t in open_} | set(p.queues or ())) if own else []
    return render_template(
        "console/tasks.html",
        tasks=open_,
        queues=queues,
        ns=data["ns"],
        own=own,
        namespaces=data["namespaces"],
        total=data["total"],
        cap=COUNT_CAP,
        can_read_workflows=can(Scope.WORKFLOWS_READ),
    )


@bp.get("/tasks")
@page(WORK)
def tasks_page() -> str:
    return _tasks_page()


@bp.post("/tasks/claim")
@page(WORK)
def task_claim() -> Response:
    def work() -> Response:
        body = schemas.load(
            ClaimRequest(), {"queues": [request.form.get("queue", "")], "max_tasks": 1, "wait_seconds": 0}
        )
        p = principal()
        check_queue_scope(p, body["queues"])
        with transaction() as conn:
            got = task_protocol.claim(
                conn, p.namespace_id, body["queues"], 1, settings.TASK_LEASE_SECONDS.get()
            )
        if not got:
            return done(f"No open task on {body['queues'][0]} right now.", "console.tasks_page")
        mine = _claimed()
        mine[got[0]["id"]] = got[0]["epoch"]
        session[CLAIMED_KEY] = dict(list(mine.items())[-MAX_CLAIMED:])
        return done(f"Claimed task {got[0]['id']} (step {got[0]['step_key']}).", "console.tasks_page")

    return in_place("claim", ("queue",), work, _tasks_page)


def _epoch(task_id: str) -> int:
    epoch = _claimed().get(task_id)
    if epoch is None:
        raise NotFound("this session has not claimed that task (claim it first)")
    return epoch


def _forget(task_id: str) -> None:
    mine = _claimed()
    mine.pop(task_id, None)
    session[CLAIMED_KEY] = mine


@bp.post("/tasks/<task_id>/complete")
@page(WORK)
def task_complete(task_id: str) -> Response:
    def work() -> Response:
        body = schemas.load(
            CompleteRequest(),
            {"epoch": _epoch(task_id), "output": json_field(request.form.get("output"), "output")},
        )
        p = principal()
        with transaction() as conn:
            t = task_protocol.complete(
                conn, p.namespace_id, task_id, body["epoch"], body["output"], p.can_use_queue
            )
        _forget(task_id)
        return done(f"Task {task_id} completed ({t['state']}).", "console.tasks_page")

    return in_place(f"complete-{task_id}", ("output",), work, _tasks_page)


@bp.post("/tasks/<task_id>/fail")
@page(WORK)
def task_fail(task_id: str) -> Response:
    def work() -> Response:
        err = {
            "message": request.form.get("message", ""),
            "retryable": request.form.get("retryable") == "yes",
        }
        body = schemas.load(FailRequest(), {"epoch": _epoch(task_id), "error": err})
        p = principal()
        with transaction() as conn:
            t = task_protocol.fail(
                conn, p.namespace_id, task_id, body["epoch"], dict(body["error"]), p.can_use_queue
            )
        _forget(task_id)
        return done(f"Task {task_id} failed ({t['state']}).", "console.tasks_page")

    return in_place(f"fail-{task_id}", ("message", "error", "retryable"), work, _tasks_page)
