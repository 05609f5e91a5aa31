"""Job ledger pages (SPEC L-UI-1, L-STATUS, L-OPS): the status panel, the filtered list with cursor
paging, job detail, the trace chain and its bundle, retry / skip / batch, replay with preview, failure
clusters. Requests are validated by the API's own schemas; actions call the same ``ops_actions``
functions (which write the audit rows) inside one transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode

from flask import Response, render_template, request
from marshmallow import Schema
from werkzeug.datastructures import MultiDict

import schemas
from app.auth import Scope
from app.db import transaction
from app.errors import InvalidArgument
from app.ids import new_id
from app.ledger import ops, ops_actions, replay, status
from schemas.jobs import (
    BatchRetryBody,
    BatchSkipBody,
    ClusterQuery,
    JobListQuery,
    ReplayBody,
    ReplayPreviewBody,
    RetryBody,
    SkipBody,
)
from web.console.common import (
    bp,
    clean_args,
    done,
    job_scope,
    page,
    platform_view,
    principal,
    read,
    require_confirmation,
)
from web.http import request_id
from web.jobs import bundle_download, clusters_of, job_filter, job_id_arg, replay_filter, trace_id_arg

MONITOR, OPERATE = Scope.ENGINE_MONITOR, Scope.ENGINE_OPERATE
PAGE_SIZE = 50
ALL_MATCHING_MAX = 500  # the batch bodies' own maximum (BatchRetryBody.job_ids)
FILTER_FIELDS = ("type", "status", "instance_id", "trace_id", "keyword", "created_from", "created_to",
                 "min_age_seconds", "max_age_seconds")  # fmt: skip
REPLAY_LISTS = ("statuses", "types")
REPLAY_INTS = ("min_age_seconds", "max_age_seconds", "sample_size", "rate", "limit")


def _aware(value: str) -> str:
    # <input type="datetime-local"> sends no zone; the form says UTC
    return value if value.endswith("Z") or "+" in value[10:] or value[10:].count("-") else value + "Z"


def parse_filter(args: Any) -> tuple[ops.JobFilter, dict[str, Any]]:
    raw = {k: v for k, v in clean_args(args).items() if k in FILTER_FIELDS}
    for k in ("created_from", "created_to"):
        if k in raw:
            raw[k] = _aware(raw[k])
    return job_filter(schemas.load(JobListQuery(), raw)), raw


def _actor(reason: str | None) -> ops_actions.Actor:
    return ops_actions.Actor(
        principal=principal(), request_id=request_id(), reason=reason, operation_id=new_id()
    )


# --------------------------------------------------------------------------- reads
@bp.get("/jobs")
@page(MONITOR)
def jobs() -> str:
    f, raw = parse_filter(request.args)
    cursor = request.args.get("cursor") or None
    q = schemas.load(JobListQuery(), {"limit": PAGE_SIZE, **({"cursor": cursor} if cursor else {})})
    platform = job_scope() is None  # the runtime status is a platform-wide view
    data = read(
        lambda c: (
            status.runtime_status(c) if platform else None,
            ops.list_jobs(c, f, limit=q["limit"], cursor=q.get("cursor")),
        )
    )
    panel, listing = data
    next_url = None
    if listing.next_cursor:
        next_url = "?" + urlencode([(k, v) for k, v in request.args.items(multi=True) if k != "cursor"]
                                   + [("cursor", listing.next_cursor)])  # fmt: skip
    return render_template(
        "console/jobs.html",
        panel=panel,
        items=listing.items,
        next_url=next_url,
        filters=raw,
        filter_qs=urlencode([(k, v) for k, v in request.args.items(multi=True) if k in FILTER_FIELDS]),
        job_types=JobListQuery().fields["type"].choices,  # type: ignore[attr-defined]
        job_statuses=JobListQuery().fields["status"].choices,  # type: ignore[attr-defined]
        first_page=cursor is None,
    )


@bp.get("/jobs/status-panel")
@page(MONITOR)
def status_panel() -> str:
    platform_view()
    return render_template("console/_status_panel.html", panel=read(status.runtime_status))


@bp.get("/jobs/<id>")
@page(MONITOR)
def job(id: str) -> str:  # noqa: A002
    job_id = job_id_arg(id)
    ns = job_scope()
    detail = read(lambda c: ops.job_detail(c, job_id, ns))
    return render_template(
        "console/job.html",
        job=detail,
        can_retry=ops_actions.retry_refusal(detail["status"], detail["attempts"]) is None,
        can_skip=ops_actions.skip_refusal(detail["status"]) is None,
    )


@bp.get("/chain/<trace_id>")
@page(MONITOR)
def chain(trace_id: str) -> str:
    tid = trace_id_arg(trace_id)
    ns = job_scope()
    return render_template(
        "console/chain.html", chain=read(lambda c: ops.chain(c, tid, namespace_id=ns)), trace_id=tid
    )


@bp.get("/chain/<trace_id>/bundle")
@page(MONITOR)
def bundle(trace_id: str) -> Response:
    return bundle_download(trace_id_arg(trace_id))


@bp.get("/jobs/clusters")
@page(MONITOR)
def clusters() -> str:
    q = schemas.load(ClusterQuery(), clean_args(request.args))
    data = read(lambda c: clusters_of(c, q))
    for c in data["clusters"]:
        cond = c["replay_conditions"]
        c["replay_qs"] = urlencode(
            [(k, x) for k, v in cond.items() for x in (v if isinstance(v, list) else [v])], doseq=False
        )
    return render_template("console/clusters.html", data=data, group_by=q.get("group_by", ("reason", "type")))


@bp.get("/jobs/replay")
@page(MONITOR)
def replay_page() -> str:
    conditions = clean_args(request.args, lists=REPLAY_LISTS, ints=REPLAY_INTS)
    conditions.pop("rate", None)
    conditions.pop("limit", None)
    asked = conditions.pop("preview", None) is not None
    preview = None
    if conditions or asked:
        body = schemas.load(ReplayPreviewBody(), conditions)
        f = replay_filter(body)
        preview = read(lambda c: replay.preview(c, f, sample_size=body["sample_size"]))
    conditions.pop("sample_size", None)
    return render_template(
        "console/replay.html",
        preview=preview,
        conditions=conditions,
        job_types=JobListQuery().fields["type"].choices,  # type: ignore[attr-defined]
        replayable=replay.REPLAYABLE,
    )


# --------------------------------------------------------------------------- actions
def _one(raw_id: str, schema: type[Schema], act: Callable[..., dict[str, Any]], verb: str) -> Response:
    """Retry or skip one job: the API's body schema, a confirmation, one transaction (audited)."""
    job_id = job_id_arg(raw_id)
    b = schemas.load(schema(), {"reason": request.form.get("reason", "")})
    require_confirmation(request.form)
    with transaction() as conn:
        job = act(conn, job_id, _actor(b.get("reason")))["job"]
    return done(
        f"Job {job_id} {verb}: now {job['status']}, generation {job['generation']}.", "console.job", id=job_id
    )


@bp.post("/jobs/<id>/retry")
@page(OPERATE)
def retry(id: str) -> Response:  # noqa: A002
    return _one(id, RetryBody, ops_actions.retry_one, "retried")


@bp.post("/jobs/<id>/skip")
@page(OPERATE)
def skip(id: str) -> Response:  # noqa: A002
    return _one(id, SkipBody, ops_actions.skip_one, "skipped")


def _matching_ids(filter_qs: str) -> list[str]:
    """Every job id the list filter matches, newest first, at most ALL_MATCHING_MAX (bounded pages)."""
    f, _ = parse_filter(MultiDict(parse_qsl(filter_qs)))
    ids: list[str] = []
    cursor = None
    while len(ids) < ALL_MATCHING_MAX:
        page_ = read(lambda c, cur=cursor: ops.list_jobs(c, f, limit=100, cursor=cur))
        ids += [str(j["id"]) for j in page_.items]
        cursor = page_.next_cursor
        if not cursor:
            break
    return ids[:ALL_MATCHING_MAX]


@bp.post("/jobs/batch")
@page(OPERATE)
def batch() -> Response:
    form = request.form
    action = form.get("action")
    if action not in ("retry", "skip"):
        raise InvalidArgument("choose retry or skip", field="action")
    ids = _matching_ids(form.get("filter_qs", "")) if form.get("scope") == "all" else form.getlist("job_ids")
    if not ids:
        raise InvalidArgument("select at least one job (or all matching)", field="job_ids")
    raw = {"job_ids": ids, "reason": form.get("reason", "")}
    if action == "retry":
        raw.update({k: v for k, v in clean_args(form, ints=("rate",)).items() if k == "rate"})
        b = schemas.load(BatchRetryBody(), raw)
    else:
        b = schemas.load(BatchSkipBody(), raw)
    require_confirmation(form)
    job_ids = [int(i) for i in b["job_ids"]]
    with transaction() as conn:
        if action == "retry":
            out = ops_actions.batch_retry(conn, job_ids, _actor(b["reason"]), rate=b["rate"])
        else:
            out = ops_actions.batch_skip(conn, job_ids, _actor(b["reason"]))
    return done(_batch_message(action, out), "console.jobs")


def _batch_message(action: str, out: dict[str, Any]) -> str:
    counts = {k: v for k, v in out.items() if isinstance(v, int) and not isinstance(v, bool)}
    return f"{action.capitalize()}: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items())


@bp.post("/jobs/replay")
@page(OPERATE)
def replay_run() -> Response:
    raw = clean_args(request.form, lists=REPLAY_LISTS, ints=REPLAY_INTS)
    raw.pop("confirm", None)
    raw.pop("csrf_token", None)
    b = schemas.load(ReplayBody(), raw)
    require_confirmation(request.form)
    f = replay_filter(b)
    with transaction() as conn:
        out = ops_actions.replay(conn, f, _actor(b["reason"]), limit=b["limit"], rate=b["rate"])
    return done(_batch_message("replay", out), "console.jobs", status="pending")
