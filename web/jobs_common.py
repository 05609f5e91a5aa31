"""What the job ledger's API routes and the console share: path arguments, the list and replay filters
of a loaded schema (with the caller's namespace scope), failure clusters and the diagnostic bundle."""

from __future__ import annotations

import re
from typing import Any

from flask import Response
from sqlalchemy import Connection

from app.db import get_engine
from app.errors import InvalidArgument
from app.ledger import job_reads, replay
from web.auth import current_principal
from web.http import json_response, request_id


def job_id_arg(raw: str) -> int:
    job_id = job_reads.parse_job_id(raw)
    if job_id is None:
        raise InvalidArgument("job id must be a positive decimal integer", field="id")
    return job_id


def trace_id_arg(raw: str) -> str:
    if not raw or len(raw) > 256:
        raise InvalidArgument("trace id must be 1-256 characters", field="traceId")
    return raw


def job_filter(query: dict[str, Any]) -> job_reads.JobFilter:
    """The list filter of a loaded ``JobListQuery`` (the API route and the console)."""
    return job_reads.JobFilter(
        types=query.get("type", ()),
        statuses=query.get("status", ()),
        instance_id=query.get("instance_id"),
        trace_id=query.get("trace_id"),
        keyword=query.get("keyword"),
        created_from=query.get("created_from"),
        created_to=query.get("created_to"),
        min_age_seconds=query.get("min_age_seconds"),
        max_age_seconds=query.get("max_age_seconds"),
        namespace_id=scope(),
    )


def replay_filter(b: dict[str, Any]) -> replay.ReplayFilter:
    return replay.ReplayFilter(
        statuses=tuple(b.get("statuses") or replay.REPLAYABLE),
        types=tuple(dict.fromkeys(b.get("types") or ())),
        instance_id=b.get("instance_id"),
        trace_id=b.get("trace_id"),
        error_keyword=b.get("error_keyword"),
        error_pattern=b.get("error_pattern"),
        min_age_seconds=b.get("min_age_seconds"),
        max_age_seconds=b.get("max_age_seconds"),
        namespace_id=scope(),
    )


def scope() -> str | None:
    """The namespace whose jobs the caller reaches (None: a platform-wide operator credential)."""
    return current_principal().job_namespace


def clusters_of(conn: Connection, query: dict[str, Any]) -> dict[str, Any]:
    """The failure clusters of a loaded ``ClusterQuery`` (the API route and the console)."""
    return replay.failure_clusters(
        conn,
        group_by=query.get("group_by", ("reason", "type")),
        types=query.get("type", ()),
        statuses=query.get("status", replay.REPLAYABLE),
        instance_id=query.get("instance_id"),
        trace_id=query.get("trace_id"),
        limit=query["limit"],
        namespace_id=scope(),
    )


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def bundle_download(trace_id: str) -> Response:
    """The diagnostic bundle of a trace as a JSON attachment (the API route and the console)."""
    ns = scope()
    with get_engine().connect() as conn, conn.begin():
        bundle = job_reads.diagnostic_bundle(conn, trace_id, request_id=request_id(), namespace_id=ns)
    stamp = bundle["exported_at"].strftime("%Y%m%dT%H%M%SZ")
    name = f"ledgerflow-trace-{_UNSAFE.sub('_', trace_id)[:80]}-{stamp}.json"
    return json_response(bundle, 200, {"Content-Disposition": f'attachment; filename="{name}"'})
