"""Operator reads of the job ledger (SPEC L-OPS-1): list, summary, detail, trace chain, diagnostic
bundle. Mutations live in ``ops_actions.py``; failure clusters and replay selection in ``replay.py``;
the runtime status in ``status.py``. Jobs are presented with ``id`` as a decimal string."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Text,
    cast,
    column,
    func,
    literal,
    null,
    or_,
    select,
    table,
    tuple_,
    union_all,
)
from sqlalchemy.sql.elements import ColumnElement

from app import cursor as cursors
from app import jsonx
from app.db import db_now
from app.errors import InvalidArgument, NotFound
from app.ledger.models import JOB_STATUSES, JOB_TYPES, effects, executions, jobs, trace_is
from app.ledger.status import runtime_status
from app.sql import query, run

MAX_JOB_ID = 2**63 - 1

LIST_COLUMNS = [
    jobs.c.id,
    jobs.c.type,
    jobs.c.queue,
    jobs.c.status,
    jobs.c.instance_id,
    jobs.c.task_id,
    jobs.c.step_key,
    jobs.c.priority,
    jobs.c.run_at,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.generation,
    jobs.c.lease_until,
    jobs.c.execution_deadline,
    jobs.c.execution_timeout_ms,
    jobs.c.remaining_ms,
    jobs.c.last_error,
    jobs.c.error_code,
    jobs.c.operation_key,
    jobs.c.idempotency_key,
    jobs.c.trace_id,
    jobs.c.created_at,
    jobs.c.updated_at,
    jobs.c.finished_at,
    (jobs.c.effect_marker.isnot(None)).label("has_effect_marker"),
]
DETAIL_COLUMNS = [
    *LIST_COLUMNS,
    cast(jobs.c.payload, Text).label("payload"),
    cast(jobs.c.result, Text).label("result"),
    cast(jobs.c.effect_marker, Text).label("effect_marker"),
]


def job_view(row: Any) -> dict[str, Any]:
    d = dict(row._mapping)
    d["id"] = str(d["id"])
    for k in ("payload", "result", "effect_marker"):
        if k in d:
            d[k] = jsonx.loads_exact_db(d[k])
    return d


def parse_job_id(raw: str) -> int | None:
    """A job id from a path or body: ASCII decimal digits within bigint, else None (``str.isdigit``
    alone takes other scripts' digits: ``１`` was job 1)."""
    if not raw or not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        return None
    value = int(raw)
    return value if 0 < value <= MAX_JOB_ID else None


# --------------------------------------------------------------------------- list
@dataclass(frozen=True)
class JobFilter:
    types: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    instance_id: str | None = None
    trace_id: str | None = None
    keyword: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    min_age_seconds: int | None = None
    max_age_seconds: int | None = None
    namespace_id: str | None = None  # a namespace-scoped operator: only its namespace's instances' jobs

    def binding(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("created_from", "created_to"):
            d[k] = None if d[k] is None else jsonx.rfc3339(d[k])
        d["types"], d["statuses"] = sorted(self.types), sorted(self.statuses)
        return {"kind": "ledger.jobs", **d}


def _like(value: str) -> str:
    return "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


_instances_t = table("workflow_instances", column("id"), column("namespace_id"))


def in_namespace(namespace_id: str | None) -> list[ColumnElement[bool]]:
    """Jobs a principal may see: every job (``None``: a platform-wide operator) or the jobs of one
    namespace's instances (a job without an instance belongs to the platform)."""
    if namespace_id is None:
        return []
    mine = select(_instances_t.c.id).where(_instances_t.c.namespace_id == namespace_id)
    return [jobs.c.instance_id.in_(mine)]


def filter_clauses(f: JobFilter) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = in_namespace(f.namespace_id)
    # a value outside the enum types matches no job (PostgreSQL would refuse to read it as the enum)
    if f.types:
        where.append(jobs.c.type.in_([t for t in f.types if t in JOB_TYPES]))
    if f.statuses:
        where.append(jobs.c.status.in_([s for s in f.statuses if s in JOB_STATUSES]))
    if f.instance_id:
        where.append(jobs.c.instance_id == f.instance_id)
    if f.trace_id:
        where.append(trace_is(f.trace_id))
    if f.keyword:
        pattern = _like(f.keyword)
        alts: list[ColumnElement[bool]] = [
            jobs.c.operation_key.ilike(pattern, escape="\\"),
            jobs.c.last_error.ilike(pattern, escape="\\"),
            cast(jobs.c.payload, Text).ilike(pattern, escape="\\"),
        ]
        job_id = parse_job_id(f.keyword.strip())
        if job_id is not None:
            alts.append(jobs.c.id == job_id)
        where.append(or_(*alts))
    if f.created_from is not None:
        where.append(jobs.c.created_at >= f.created_from)
    if f.created_to is not None:
        where.append(jobs.c.created_at < f.created_to)
    if f.min_age_seconds is not None:
        where.append(
            jobs.c.created_at <= func.now() - func.make_interval(0, 0, 0, 0, 0, 0, f.min_age_seconds)
        )
    if f.max_age_seconds is not None:
        where.append(
            jobs.c.created_at >= func.now() - func.make_interval(0, 0, 0, 0, 0, 0, f.max_age_seconds)
        )
    return where


@dataclass(frozen=True)
class JobPage:
    items: list[dict[str, Any]]
    next_cursor: str | None


def list_jobs(conn: Connection, f: JobFilter, *, limit: int = 20, cursor: str | None = None) -> JobPage:
    """Newest first (created_at, id descending); the cursor is bound to the filter set."""
    binding = f.binding()
    where = filter_clauses(f)
    if cursor:
        pos = cursors.decode(cursor, binding, t=cursors.TIME, i=cursors.TEXT)
        job_id = parse_job_id(pos["i"])
        if job_id is None:
            raise InvalidArgument("cursor is malformed", field="cursor")
        where.append(tuple_(jobs.c.created_at, jobs.c.id) < tuple_(pos["t"], job_id))
    stmt = (
        select(*LIST_COLUMNS)
        .where(*where)
        .order_by(jobs.c.created_at.desc(), jobs.c.id.desc())
        .limit(limit + 1)
    )
    rows = conn.execute(stmt).all()
    items = [job_view(r) for r in rows[:limit]]
    nxt = None
    if len(rows) > limit:
        last = items[-1]
        nxt = cursors.encode({"t": jsonx.rfc3339(last["created_at"]), "i": last["id"]}, binding)
    return JobPage(items=items, next_cursor=nxt)


def summary(conn: Connection, namespace_id: str | None = None) -> dict[str, Any]:
    """Counts by type × status over the whole ledger (or one namespace's jobs)."""
    rows = conn.execute(
        select(jobs.c.type, jobs.c.status, func.count().label("count"))
        .where(*in_namespace(namespace_id))
        .group_by(jobs.c.type, jobs.c.status)
        # by name, as before the columns were enums (an enum sorts in its declared order)
        .order_by(cast(jobs.c.type, Text), cast(jobs.c.status, Text))
    ).all()
    by_type: dict[str, dict[str, int]] = {}
    by_status: dict[str, int] = {}
    for r in rows:  # r.count would read as tuple.count to a type checker: the column by its key
        by_type.setdefault(r.type, {})[r.status] = r._mapping["count"]
        by_status[r.status] = by_status.get(r.status, 0) + r._mapping["count"]
    return {
        "items": [{"type": r.type, "status": r.status, "count": r._mapping["count"]} for r in rows],
        "by_type": by_type,
        "by_status": by_status,
        "total": sum(by_status.values()),
    }


# --------------------------------------------------------------------------- detail
ATTEMPT_COLUMNS = [
    executions.c.id,
    executions.c.generation,
    executions.c.attempt,
    executions.c.status,
    executions.c.worker_id,
    cast(executions.c.request, Text).label("request"),
    cast(executions.c.response, Text).label("response"),
    executions.c.error,
    executions.c.error_code,
    executions.c.due_at,
    executions.c.started_at,
    executions.c.finished_at,
    executions.c.duration_ms,
]


# the open attempt of a running job, from its job row, in the shape of ATTEMPT_COLUMNS
OPEN_ATTEMPT_COLUMNS = [
    jobs.c.attempt_id.label("id"),
    jobs.c.generation,
    jobs.c.attempts.label("attempt"),
    literal("running", executions.c.status.type).label("status"),
    jobs.c.worker_id,
    cast(jobs.c.payload, Text).label("request"),
    null().label("response"),
    null().label("error"),
    null().label("error_code"),
    jobs.c.run_at.label("due_at"),
    jobs.c.attempt_started_at.label("started_at"),
    null().label("finished_at"),
    null().label("duration_ms"),
]


def _attempts(conn: Connection, job_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Every attempt of the jobs, oldest first: the final ones, then a running job's open attempt."""
    out: dict[int, list[dict[str, Any]]] = {i: [] for i in job_ids}
    if not job_ids:
        return out
    final = select(executions.c.job_id, *ATTEMPT_COLUMNS).where(executions.c.job_id.in_(job_ids))
    running = select(jobs.c.id.label("job_id"), *OPEN_ATTEMPT_COLUMNS).where(
        jobs.c.id.in_(job_ids), jobs.c.status == "running"
    )
    both = union_all(final, running).subquery()
    rows = conn.execute(select(both).order_by(both.c.job_id, both.c.generation, both.c.attempt)).all()
    for r in rows:
        d = dict(r._mapping)
        job_id = d.pop("job_id")
        d["id"] = str(d["id"])
        d["request"] = jsonx.loads_exact_db(d["request"])
        d["response"] = jsonx.loads_exact_db(d["response"])
        out[job_id].append(d)
    return out


def _receipts(conn: Connection, job_id: int, operation_key: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        select(
            effects.c.id,
            effects.c.operation_key,
            effects.c.step_key,
            effects.c.job_id,
            effects.c.generation,
            cast(effects.c.result, Text).label("result"),
            effects.c.created_at,
        )
        .where(or_(effects.c.job_id == job_id, effects.c.operation_key == operation_key))
        .order_by(effects.c.created_at, effects.c.id)
    ).all()
    out = []
    for r in rows:
        d = dict(r._mapping)
        d["id"] = str(d["id"])
        d["job_id"] = None if d["job_id"] is None else str(d["job_id"])
        d["result"] = jsonx.loads_exact_db(d["result"])
        out.append(d)
    return out


def job_detail(conn: Connection, job_id: int, namespace_id: str | None = None) -> dict[str, Any]:
    """The parent job with every attempt of every generation, its receipts and side-effect marker."""
    row = conn.execute(
        select(*DETAIL_COLUMNS).where(jobs.c.id == job_id, *in_namespace(namespace_id))
    ).first()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    job = job_view(row)
    job["attempts_history"] = _attempts(conn, [job_id])[job_id]
    job["receipts"] = _receipts(conn, job_id, job["operation_key"])
    return job


_LEDGER_INSTANCES_TABLE_EXISTS = query(
    "ledger_instances_table_exists",
    "SELECT to_regclass('workflow_instances')",
)


_LEDGER_TRACE_INSTANCES = query(
    "ledger_trace_instances",
    """
SELECT id, namespace_id, definition_id, version, state, paused, trace_id, parent_instance_id,
       created_at, updated_at, completed_at
FROM workflow_instances WHERE id = ANY(CAST(:ids AS text[]))
""",
)


# --------------------------------------------------------------------------- chain and bundle
def _instances(conn: Connection, instance_ids: list[str]) -> list[dict[str, Any]]:
    """Summaries of linked workflow instances (when the engine's table exists)."""
    if not instance_ids:
        return []
    if run(conn, _LEDGER_INSTANCES_TABLE_EXISTS).scalar() is None:
        return [{"id": i, "found": False} for i in instance_ids]
    rows = run(conn, _LEDGER_TRACE_INSTANCES, {"ids": instance_ids}).all()
    found = {r.id: {**dict(r._mapping), "found": True} for r in rows}
    return [found.get(i, {"id": i, "found": False}) for i in instance_ids]


MAX_CHAIN_JOBS = 500


def chain(
    conn: Connection, trace_id: str, *, with_attempts: bool = False, namespace_id: str | None = None
) -> dict[str, Any]:
    """Jobs of ``trace_id`` in causal/time order (created_at, id), with linked instances: at most
    ``MAX_CHAIN_JOBS`` (``truncated`` says when more exist)."""
    columns = DETAIL_COLUMNS if with_attempts else LIST_COLUMNS
    rows = conn.execute(
        select(*columns)
        .where(trace_is(trace_id), *in_namespace(namespace_id))
        .order_by(jobs.c.created_at, jobs.c.id)
        .limit(MAX_CHAIN_JOBS + 1)
    ).all()
    if not rows:
        raise NotFound(f"no jobs with trace id {trace_id!r}")
    truncated = len(rows) > MAX_CHAIN_JOBS
    items = [job_view(r) for r in rows[:MAX_CHAIN_JOBS]]
    if with_attempts:
        attempts = _attempts(conn, [int(j["id"]) for j in items])
        for j in items:
            j["attempts_history"] = attempts[int(j["id"])]
            j["receipts"] = _receipts(conn, int(j["id"]), j["operation_key"])
    instance_ids = list(dict.fromkeys(j["instance_id"] for j in items if j["instance_id"]))
    return {
        "trace_id": trace_id,
        "jobs": items,
        "truncated": truncated,
        "instance_ids": instance_ids,
        "instances": _instances(conn, instance_ids),
    }


def diagnostic_bundle(
    conn: Connection, trace_id: str, *, request_id: str | None, namespace_id: str | None = None
) -> dict[str, Any]:
    """One self-contained document for someone without database access: the chain with every attempt
    and receipt, linked instance summaries, per-status counts and the runtime status at export."""
    doc = chain(conn, trace_id, with_attempts=True, namespace_id=namespace_id)
    counts: dict[str, int] = {}
    for j in doc["jobs"]:
        counts[j["status"]] = counts.get(j["status"], 0) + 1
    return {
        "format": "ledgerflow.diagnostic-bundle/v1",
        "exported_at": db_now(conn),
        "request_id": request_id,
        "trace_id": trace_id,
        "status_counts": counts,
        "jobs": doc["jobs"],
        "truncated": doc["truncated"],
        "instance_ids": doc["instance_ids"],
        "instances": doc["instances"],
        # the runtime status is a platform-wide view (L-API-2): only a platform-wide operator's bundle has it
        "runtime_status": runtime_status(conn) if namespace_id is None else None,
    }
