"""Job ledger pages (SPEC L-UI-1, L-STATUS, L-OPS): the status panel, the filtered list with totals and
previous / next paging (refreshing itself), job detail, the trace chain and its bundle, retry / skip /
batch, replay with preview, failure clusters. Requests are validated by the API's own schemas; actions
call the same ``job_actions`` functions (which write the audit rows) inside one transaction. A refused
filter or action shows the page again with the error beside its field and what was typed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC
from typing import Any
from urllib.parse import parse_qsl, urlencode

from flask import Response, g, render_template, request
from marshmallow import Schema
from werkzeug.datastructures import MultiDict

import schemas
from app.auth import Scope
from app.db import transaction
from app.engine import lookup
from app.errors import InvalidArgument
from app.ids import new_id
from app.integrations import subscriptions
from app.ledger import job_actions, job_reads, replay, status
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
    FormState,
    bp,
    can,
    clean_args,
    done,
    in_place,
    job_scope,
    page,
    pager,
    platform_view,
    principal,
    read,
    require_confirmation,
    rfc3339_of_local,
)
from web.http import request_id
from web.jobs_common import bundle_download, clusters_of, job_filter, job_id_arg, replay_filter, trace_id_arg

MONITOR, OPERATE = Scope.ENGINE_MONITOR, Scope.ENGINE_OPERATE
PAGE_SIZE = 50
COUNT_CAP = 10_000  # totals are counted up to here ("10000+" beyond: a count of 1 M rows costs seconds)
ALL_MATCHING_MAX = 500  # the batch bodies' own maximum (BatchRetryBody.job_ids)
FILTER_FIELDS = (
    "type",
    "status",
    "instance_id",
    "trace_id",
    "keyword",
    "created_from",
    "created_to",
    "min_age_seconds",
    "max_age_seconds",
)
REPLAY_LISTS = ("statuses", "types")
REPLAY_INTS = ("min_age_seconds", "max_age_seconds", "sample_size", "rate", "limit")


def parse_filter(args: Any) -> tuple[job_reads.JobFilter, dict[str, Any]]:
    """The list filter of query fields (the API's schema validates them) and the values to show back in
    the filter form (times in the ``datetime-local`` format, so the next Filter click keeps them)."""
    raw = {k: v for k, v in clean_args(args).items() if k in FILTER_FIELDS}
    for k in ("created_from", "created_to"):
        if k in raw:
            raw[k] = rfc3339_of_local(raw[k])
    loaded = schemas.load(JobListQuery(), raw)
    shown = dict(raw)
    for k in ("created_from", "created_to"):
        if k in loaded:
            shown[k] = loaded[k].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return job_filter(loaded), shown


def _actor(reason: str | None) -> job_actions.Actor:
    return job_actions.Actor(
        principal=principal(), request_id=request_id(), reason=reason, operation_id=new_id()
    )


# --------------------------------------------------------------------------- reads
def _jobs_page(status_code: int = 200) -> tuple[str, int]:
    args = (
        request.args if request.method == "GET" else MultiDict(parse_qsl(request.form.get("filter_qs", "")))
    )
    platform = job_scope() is None  # the runtime status is a platform-wide view
    try:
        f, shown = parse_filter(args)
        cursor = args.get("cursor") or None
        q = schemas.load(JobListQuery(), {"limit": PAGE_SIZE, **({"cursor": cursor} if cursor else {})})
    except InvalidArgument as exc:  # a refused filter: the form again, with the error beside the field
        if g.get("form") is None:
            g.form = FormState(
                "filters",
                MultiDict(args),
                {e.field: [e.message] for e in exc.field_errors},
                None if exc.field_errors else exc.message,
            )
        f, shown, q, status_code = None, {k: v for k, v in args.items() if k in FILTER_FIELDS}, None, 400

    def load(c: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"items": [], "next": None, "total": 0, "namespaces": {}}
        if f is not None and q is not None:
            listing = job_reads.list_jobs(c, f, limit=q["limit"], cursor=q.get("cursor"))
            out.update(
                items=listing.items, next=listing.next_cursor, total=lookup.count_jobs(c, f, COUNT_CAP)
            )
            out["namespaces"] = lookup.instance_namespaces(c, (j["instance_id"] for j in listing.items))
        return out

    data = read(load)
    return render_template(
        "console/jobs.html",
        platform=platform,
        items=data["items"],
        namespaces=data["namespaces"],
        show_namespace=platform,
        can_read_workflows=can(Scope.WORKFLOWS_READ),
        pages=pager(
            args,
            data["next"],
            len(data["items"]),
            PAGE_SIZE,
            data["total"],
            COUNT_CAP,
            uncounted=data["total"] is None,
        ),
        filters=shown,
        filter_qs=urlencode([(k, v) for k, v in args.items(multi=True) if k in FILTER_FIELDS]),
        job_types=JobListQuery().fields["type"].choices,  # type: ignore[attr-defined]  # a CommaList field
        job_statuses=JobListQuery().fields["status"].choices,  # type: ignore[attr-defined]  # a CommaList field
    ), status_code


@bp.get("/jobs")
@page(MONITOR)
def jobs() -> tuple[str, int]:
    return _jobs_page()


@bp.get("/jobs/status-panel")
@page(MONITOR)
def status_panel() -> str:
    platform_view()
    return render_template("console/_status_panel.html", panel=read(status.runtime_status))


def _job_page(job_id: int) -> str:
    ns = job_scope()

    def load(c: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
        detail = job_reads.job_detail(c, job_id, ns)
        delivery = None
        if detail["type"] == "webhook_delivery" and isinstance(detail.get("payload"), dict):
            delivery = subscriptions.delivery_links(c, detail["payload"].get("delivery_id"), ns)
        return detail, lookup.instance_namespaces(c, [detail["instance_id"]]), delivery

    detail, namespaces, delivery = read(load)
    return render_template(
        "console/job.html",
        job=detail,
        delivery=delivery,
        instance_ns=namespaces.get(detail["instance_id"] or ""),
        can_read_workflows=can(Scope.WORKFLOWS_READ),
        can_retry=job_actions.retry_refusal(detail["status"], detail["attempts"]) is None,
        can_skip=job_actions.skip_refusal(detail["status"]) is None,
    )


@bp.get("/jobs/<id>")
@page(MONITOR)
def job(id: str) -> str:
    return _job_page(job_id_arg(id))


@bp.get("/chain/<trace_id>")
@page(MONITOR)
def chain(trace_id: str) -> str:
    tid = trace_id_arg(trace_id)
    ns = job_scope()

    def load(c: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        ch = job_reads.chain(c, tid, namespace_id=ns)
        ids = [i["id"] for i in ch.get("instances", [])] + [j["instance_id"] for j in ch["jobs"]]
        return ch, lookup.instance_namespaces(c, ids)

    ch, namespaces = read(load)
    return render_template(
        "console/chain.html",
        chain=ch,
        trace_id=tid,
        namespaces=namespaces,
        can_read_workflows=can(Scope.WORKFLOWS_READ),
        show_namespace=ns is None,
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


def _replay_page(status_code: int = 200) -> tuple[str, int]:
    source = request.args if request.method == "GET" else request.form
    conditions = clean_args(source, lists=REPLAY_LISTS, ints=REPLAY_INTS)
    for k in ("rate", "limit", "reason", "confirm", "csrf_token", "back"):
        conditions.pop(k, None)
    asked = conditions.pop("preview", None) is not None or request.method == "POST"
    preview = None
    try:
        if conditions or asked:
            body = schemas.load(ReplayPreviewBody(), conditions)
            f = replay_filter(body)
            preview = read(lambda c: replay.preview(c, f, sample_size=body["sample_size"]))
    except InvalidArgument as exc:
        if g.get("form") is None:
            g.form = FormState(
                "conditions",
                MultiDict(request.args),
                {e.field: [e.message] for e in exc.field_errors},
                None if exc.field_errors else exc.message,
            )
        status_code = 400
    conditions.pop("sample_size", None)
    return render_template(
        "console/replay.html",
        preview=preview,
        conditions=conditions,
        job_types=JobListQuery().fields["type"].choices,  # type: ignore[attr-defined]  # a CommaList field
        replayable=replay.REPLAYABLE,
    ), status_code


@bp.get("/jobs/replay")
@page(MONITOR)
def replay_page() -> tuple[str, int]:
    return _replay_page()


# --------------------------------------------------------------------------- actions
def _one(raw_id: str, schema: type[Schema], act: Callable[..., dict[str, Any]], verb: str) -> Response:
    """Retry or skip one job: the API's body schema, a confirmation, one transaction (audited)."""
    job_id = job_id_arg(raw_id)

    def work() -> Response:
        b = schemas.load(schema(), {"reason": request.form.get("reason", "")})
        require_confirmation(request.form)
        with transaction() as conn:
            job = act(conn, job_id, _actor(b.get("reason")))["job"]
        return done(
            f"Job {job_id} {verb}: now {job['status']}, generation {job['generation']}.",
            "console.job",
            id=job_id,
        )

    return in_place(verb, ("reason", "confirm"), work, lambda: _job_page(job_id))


@bp.post("/jobs/<id>/retry")
@page(OPERATE)
def retry(id: str) -> Response:
    return _one(id, RetryBody, job_actions.retry_one, "retried")


@bp.post("/jobs/<id>/skip")
@page(OPERATE)
def skip(id: str) -> Response:
    return _one(id, SkipBody, job_actions.skip_one, "skipped")


def _matching_ids(filter_qs: str) -> list[str]:
    """Every job id the list filter matches, newest first, at most ALL_MATCHING_MAX (bounded pages)."""
    f, _ = parse_filter(MultiDict(parse_qsl(filter_qs)))
    ids: list[str] = []
    cursor = None
    while len(ids) < ALL_MATCHING_MAX:
        page_ = read(functools.partial(job_reads.list_jobs, f=f, limit=100, cursor=cursor))
        ids += [str(j["id"]) for j in page_.items]
        cursor = page_.next_cursor
        if not cursor:
            break
    return ids[:ALL_MATCHING_MAX]


@bp.post("/jobs/batch")
@page(OPERATE)
def batch() -> Response:
    form = request.form

    def work() -> Response:
        action = form.get("action")
        if action not in ("retry", "skip"):
            raise InvalidArgument("choose retry or skip", field="action")
        ids = (
            _matching_ids(form.get("filter_qs", ""))
            if form.get("scope") == "all"
            else form.getlist("job_ids")
        )
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
                out = job_actions.batch_retry(conn, job_ids, _actor(b["reason"]), rate=b["rate"])
            else:
                out = job_actions.batch_skip(conn, job_ids, _actor(b["reason"]))
        return done(_batch_message(action, out), "console.jobs")

    return in_place(
        "batch", ("action", "job_ids", "scope", "rate", "reason", "confirm"), work, lambda: _jobs_page()[0]
    )


def _batch_message(action: str, out: dict[str, Any]) -> str:
    counts = {k: v for k, v in out.items() if isinstance(v, int) and not isinstance(v, bool)}
    return f"{action.capitalize()}: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items())


@bp.post("/jobs/replay")
@page(OPERATE)
def replay_run() -> Response:
    def work() -> Response:
        raw = clean_args(request.form, lists=REPLAY_LISTS, ints=REPLAY_INTS)
        for k in ("confirm", "csrf_token", "back"):
            raw.pop(k, None)
        # the reason is required here (optional in the API): blank is refused by the schema, not dropped
        raw["reason"] = request.form.get("reason", "")
        b = schemas.load(ReplayBody(), raw)
        require_confirmation(request.form)
        f = replay_filter(b)
        with transaction() as conn:
            out = job_actions.replay(conn, f, _actor(b["reason"]), limit=b["limit"], rate=b["rate"])
        return done(_batch_message("replay", out), "console.jobs", status="pending")

    return in_place("replay", ("rate", "limit", "reason", "confirm"), work, lambda: _replay_page()[0])
