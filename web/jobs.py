"""Job ledger operator API (SPEC L-API), mounted at ``/api/workflows/engine``.

Reads and previews need ``workflow:instance:monitor``; retry, skip and replay need
``workflow:engine:operate``, an ``Idempotency-Key``, and write an audit row in their transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response
from sqlalchemy import Connection

from app.auth import Scope
from app.db import get_engine
from app.errors import InvalidArgument
from app.ids import new_id
from app.ledger import job_actions, job_reads, replay, status
from schemas.base import ANY, envelope
from schemas.jobs import (
    JOB_ID_PATTERN,
    BatchRetryBody,
    BatchSkipBody,
    ClusterQuery,
    DiagnosticBundleSchema,
    JobDetailSchema,
    JobListQuery,
    JobPageSchema,
    ReplayBody,
    ReplayPreviewBody,
    RetryBody,
    SkipBody,
)
from web.auth import current_principal, require_platform, requires
from web.http import ok, request_id, success
from web.jobs_common import (
    bundle_download,
    clusters_of,
    job_filter,
    job_id_arg,
    replay_filter,
    trace_id_arg,
)
from web.jobs_common import scope as _scope
from web.meta import doc
from web.mutation import Replay, idempotent, mutation
from web.strict import body, query

bp = Blueprint("jobs", __name__)

MONITOR, OPERATE = Scope.ENGINE_MONITOR, Scope.ENGINE_OPERATE
TAGS = ["job ledger"]
JOB_ID = {"id": {"type": "string", "pattern": JOB_ID_PATTERN}}
TRACE_ID = {"traceId": {"type": "string", "minLength": 1, "maxLength": 256}}
Result = envelope(ANY, "OperationResponse")


def _read(fn: Callable[[Connection], Any]) -> Any:
    with get_engine().connect() as conn, conn.begin():
        return fn(conn)


def _actor(b: dict[str, Any]) -> job_actions.Actor:
    return job_actions.Actor(
        principal=current_principal(), request_id=request_id(), reason=b.get("reason"), operation_id=new_id()
    )


def _mutate(work: Callable[[Connection], Any]) -> Response:
    return idempotent(lambda conn: (200, success(work(conn))), replay=Replay.STORED)


def _ids(raw: list[str]) -> list[int]:
    out = []
    for i, value in enumerate(raw):
        job_id = job_reads.parse_job_id(value)
        if job_id is None:
            raise InvalidArgument("job id out of range", field=f"job_ids[{i}]")
        out.append(job_id)
    return out


# --------------------------------------------------------------------------- reads
@bp.get("/jobs")
@requires(MONITOR)
@doc(
    summary="List jobs (newest first, cursor pagination)",
    tags=TAGS,
    response=envelope(JobPageSchema, "JobListResponse"),
)
@query(JobListQuery)
def list_jobs(query: dict[str, Any]) -> Response:
    f = job_filter(query)
    page = _read(lambda c: job_reads.list_jobs(c, f, limit=query["limit"], cursor=query.get("cursor")))
    data: dict[str, Any] = {"items": page.items}
    if page.next_cursor:
        data["next_cursor"] = page.next_cursor
    return ok(data)


@bp.get("/jobs/summary")
@requires(MONITOR)
@doc(summary="Job counts by type and status", tags=TAGS, response=envelope(ANY, "JobSummaryResponse"))
def jobs_summary() -> Response:
    ns = _scope()
    return ok(_read(lambda c: job_reads.summary(c, ns)))


@bp.get("/jobs/runtime-status")
@requires(MONITOR)
@doc(
    summary="Runtime status of the ledger and pools (L-STATUS)",
    tags=TAGS,
    response=envelope(ANY, "RuntimeStatusResponse"),
)
def runtime_status() -> Response:
    require_platform("the runtime status")
    return ok(_read(status.runtime_status))


@bp.get("/jobs/failure-clusters")
@requires(MONITOR)
@doc(
    summary="Failed/dead jobs clustered by normalized error, type, instance, trace",
    tags=TAGS,
    response=envelope(ANY, "FailureClustersResponse"),
)
@query(ClusterQuery)
def failure_clusters(query: dict[str, Any]) -> Response:
    return ok(_read(lambda c: clusters_of(c, query)))


@bp.get("/jobs/<id>")
@requires(MONITOR)
@doc(
    summary="One job with every attempt of every generation, receipts and side-effect marker",
    tags=TAGS,
    response=envelope(JobDetailSchema, "JobDetailResponse"),
    path_params=JOB_ID,
)
def job_detail(id: str) -> Response:
    job_id = job_id_arg(id)
    ns = _scope()
    return ok(_read(lambda c: job_reads.job_detail(c, job_id, ns)))


@bp.get("/jobs/chain/<traceId>")
@requires(MONITOR)
@doc(
    summary="Every job of a trace id in causal/time order, with linked instances",
    tags=TAGS,
    response=envelope(ANY, "JobChainResponse"),
    path_params=TRACE_ID,
)
def job_chain(traceId: str) -> Response:
    trace_id = trace_id_arg(traceId)
    ns = _scope()
    return ok(_read(lambda c: job_reads.chain(c, trace_id, namespace_id=ns)))


@bp.get("/jobs/chain/<traceId>/diagnostic-bundle")
@requires(MONITOR)
@doc(
    summary="Diagnostic bundle of a trace (downloadable JSON attachment)",
    tags=TAGS,
    response=DiagnosticBundleSchema,
    path_params=TRACE_ID,
)
def diagnostic_bundle(traceId: str) -> Response:
    return bundle_download(trace_id_arg(traceId))


@bp.post("/jobs/replay-preview")
@requires(MONITOR)
@doc(
    summary="Count and sample of the dead/failed jobs a replay would select (changes nothing)",
    tags=TAGS,
    response=envelope(ANY, "ReplayPreviewResponse"),
)
@body(ReplayPreviewBody)
def replay_preview(body: dict[str, Any]) -> Response:
    f = replay_filter(body)
    return ok(_read(lambda c: replay.preview(c, f, sample_size=body["sample_size"])))


# --------------------------------------------------------------------------- mutations
@bp.post("/jobs/<id>/retry")
@requires(OPERATE)
@mutation
@doc(
    summary="Retry one failed/dead/canceled job (generation + 1, attempts reset)",
    tags=TAGS,
    response=Result,
    errors=(409,),
    path_params=JOB_ID,
)
@body(RetryBody)
def retry_job(id: str, body: dict[str, Any]) -> Response:
    job_id = job_id_arg(id)
    actor = _actor(body)
    has_payload = "payload" in body
    return _mutate(
        lambda c: job_actions.retry_one(
            c, job_id, actor, payload=body.get("payload"), has_payload=has_payload
        )
    )


@bp.post("/jobs/<id>/skip")
@requires(OPERATE)
@mutation
@doc(
    summary="Skip (cancel) one pending/running/paused/failed/dead job",
    tags=TAGS,
    response=Result,
    errors=(409,),
    path_params=JOB_ID,
)
@body(SkipBody)
def skip_job(id: str, body: dict[str, Any]) -> Response:
    job_id = job_id_arg(id)
    actor = _actor(body)
    return _mutate(lambda c: job_actions.skip_one(c, job_id, actor))


@bp.post("/jobs/batch-retry")
@requires(OPERATE)
@mutation
@doc(
    summary="Retry many jobs, each by the retry rule, staggered at `rate` per second",
    tags=TAGS,
    response=Result,
)
@body(BatchRetryBody)
def batch_retry(body: dict[str, Any]) -> Response:
    ids = _ids(body["job_ids"])
    actor = _actor(body)
    return _mutate(lambda c: job_actions.batch_retry(c, ids, actor, rate=body["rate"]))


@bp.post("/jobs/batch-skip")
@requires(OPERATE)
@mutation
@doc(summary="Skip (cancel) many jobs, each by the skip rule", tags=TAGS, response=Result)
@body(BatchSkipBody)
def batch_skip(body: dict[str, Any]) -> Response:
    ids = _ids(body["job_ids"])
    actor = _actor(body)
    return _mutate(lambda c: job_actions.batch_skip(c, ids, actor))


@bp.post("/jobs/replay-dead")
@requires(OPERATE)
@mutation
@doc(
    summary="Replay up to 500 dead/failed jobs matching the conditions, staggered by `rate`",
    tags=TAGS,
    response=Result,
)
@body(ReplayBody)
def replay_dead(body: dict[str, Any]) -> Response:
    f = replay_filter(body)
    actor = _actor(body)
    return _mutate(lambda c: job_actions.replay(c, f, actor, limit=body["limit"], rate=body["rate"]))
