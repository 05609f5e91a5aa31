"""Operator reads of the job ledger (SPEC L-OPS-1): list, summary, detail, trace chain, diagnostic
bundle. Mutations live in ``job_actions.py``; failure clusters and replay selection in ``replay.py``;
the runtime status in ``status.py``. Jobs are presented with ``id`` as a decimal string."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app import cursor as cursors
from app import jsonx
from app.db_time import db_now
from app.errors import InvalidArgument, NotFound
from app.ledger.models import JOB_STATUS_TYPE, JOB_STATUSES, JOB_TYPE_TYPE, JOB_TYPES, trace_match_sql
from app.ledger.status import runtime_status
from app.sql import query, run

MAX_JOB_ID = 2**63 - 1

# the columns of a job in the list (alias ``j``) and, with its documents, in its detail
LIST_COLUMNS = """j.id, j.type, j.queue, j.status, j.instance_id, j.task_id, j.step_key, j.priority, j.run_at,
    j.attempts, j.max_attempts, j.generation, j.lease_until, j.execution_deadline, j.execution_timeout_ms,
    j.remaining_ms, j.last_error, j.error_code, j.operation_key, j.idempotency_key, j.trace_id, j.created_at,
    j.updated_at, j.finished_at, j.effect_marker IS NOT NULL AS has_effect_marker"""
DETAIL_COLUMNS = (
    LIST_COLUMNS
    + """, CAST(j.payload AS text) AS payload, CAST(j.result AS text) AS result,
    CAST(j.effect_marker AS text) AS effect_marker"""
)


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


# Jobs a principal may see (alias ``j``): every job (``:job_ns`` NULL: a platform-wide operator) or the jobs
# of one namespace's instances (a job without an instance belongs to the platform)
IN_NAMESPACE = (
    "(CAST(:job_ns AS text) IS NULL OR j.instance_id IN "
    "(SELECT wi.id FROM workflow_instances wi WHERE wi.namespace_id = :job_ns))"
)
# a trace's jobs (``:trace_id``), in the form the trace index serves
TRACE_IS = trace_match_sql("j.trace_id", "trace_id")

# The list's filters (alias ``j``), each true when not given (its parameter NULL); the statements that hold
# them are planned with their values (``Query.planned_each_time``), so each keeps to the index of the
# filters given. A type or status outside the enum types matches no job (``filter_params``).
FILTER_WHERE = f"""{IN_NAMESPACE}
  AND (CAST(:types AS {JOB_TYPE_TYPE}[]) IS NULL OR j.type = ANY(CAST(:types AS {JOB_TYPE_TYPE}[])))
  AND (CAST(:statuses AS {JOB_STATUS_TYPE}[]) IS NULL OR j.status = ANY(CAST(:statuses AS {JOB_STATUS_TYPE}[])))
  AND (CAST(:instance_id AS text) IS NULL OR j.instance_id = :instance_id)
  AND (CAST(:trace_id AS text) IS NULL OR ({TRACE_IS}))
  AND (CAST(:kw AS text) IS NULL OR j.operation_key ILIKE :kw ESCAPE '\\' OR j.last_error ILIKE :kw ESCAPE '\\'
       OR CAST(j.payload AS text) ILIKE :kw ESCAPE '\\' OR j.id = CAST(:kw_id AS bigint))
  AND (CAST(:created_from AS timestamptz) IS NULL OR j.created_at >= :created_from)
  AND (CAST(:created_to AS timestamptz) IS NULL OR j.created_at < :created_to)
  AND (CAST(:min_age AS int) IS NULL OR j.created_at <= now() - make_interval(secs => :min_age))
  AND (CAST(:max_age AS int) IS NULL OR j.created_at >= now() - make_interval(secs => :max_age))"""


def filter_params(f: JobFilter) -> dict[str, Any]:
    """The parameters of ``FILTER_WHERE`` for ``f``."""
    return {
        "job_ns": f.namespace_id,
        "types": [t for t in f.types if t in JOB_TYPES] if f.types else None,
        "statuses": [s for s in f.statuses if s in JOB_STATUSES] if f.statuses else None,
        "instance_id": f.instance_id or None,
        "trace_id": f.trace_id or None,
        "kw": _like(f.keyword) if f.keyword else None,
        "kw_id": parse_job_id(f.keyword.strip()) if f.keyword else None,
        "created_from": f.created_from,
        "created_to": f.created_to,
        "min_age": f.min_age_seconds,
        "max_age": f.max_age_seconds,
    }


# newest first (created_at, id descending: ix_workflow_jobs_created), from the start or after a position
_LIST = query(
    "jobs_list",
    f"SELECT {LIST_COLUMNS} FROM workflow_jobs j WHERE {FILTER_WHERE}\n"
    "ORDER BY j.created_at DESC, j.id DESC LIMIT :limit",
    planned_each_time=True,
)
_LIST_AFTER = query(
    "jobs_list_after",
    f"SELECT {LIST_COLUMNS} FROM workflow_jobs j WHERE {FILTER_WHERE}\n"
    "  AND (j.created_at, j.id) < (:c_created, :c_id)\nORDER BY j.created_at DESC, j.id DESC LIMIT :limit",
    planned_each_time=True,
)


@dataclass(frozen=True)
class JobPage:
    items: list[dict[str, Any]]
    next_cursor: str | None


def list_jobs(conn: Connection, f: JobFilter, *, limit: int = 20, cursor: str | None = None) -> JobPage:
    """Newest first (created_at, id descending); the cursor is bound to the filter set."""
    binding = f.binding()
    params = {**filter_params(f), "limit": limit + 1}
    statement = _LIST
    if cursor:
        pos = cursors.decode(cursor, binding, t=cursors.TIME, i=cursors.TEXT)
        job_id = parse_job_id(pos["i"])
        if job_id is None:
            raise InvalidArgument("cursor is malformed", field="cursor")
        params.update(c_created=pos["t"], c_id=job_id)
        statement = _LIST_AFTER
    rows = run(conn, statement, params).all()
    items = [job_view(r) for r in rows[:limit]]
    nxt = None
    if len(rows) > limit:
        last = items[-1]
        nxt = cursors.encode({"t": jsonx.rfc3339(last["created_at"]), "i": last["id"]}, binding)
    return JobPage(items=items, next_cursor=nxt)


# by name, as before the columns were enums (an enum sorts in its declared order)
_SUMMARY = query(
    "jobs_summary",
    f"""
SELECT CAST(j.type AS text) AS type, CAST(j.status AS text) AS status, count(*) AS count
FROM workflow_jobs j WHERE {IN_NAMESPACE}
GROUP BY j.type, j.status ORDER BY 1, 2
""",
    planned_each_time=True,
)


def summary(conn: Connection, namespace_id: str | None = None) -> dict[str, Any]:
    """Counts by type × status over the whole ledger (or one namespace's jobs)."""
    rows = run(conn, _SUMMARY, {"job_ns": namespace_id}).all()
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
# every attempt of the jobs, oldest first: the final ones, then a running job's open attempt (from its job
# row, in the same shape). The attempts are partitioned by day of ``started_at`` (``partitions.EXECUTIONS``):
# ``:since``, the oldest of the jobs' ``created_at`` (no attempt starts before its job exists), and now (with
# an hour's margin for a claim that committed after this transaction began; partitions are made a week
# ahead) bound the days, so that PostgreSQL looks into those partitions only (when it plans with the value,
# or at the executor's start with a prepared generic plan), not into each partition's key: usually one day,
# against every day of the job retention.
_ATTEMPTS = query(
    "job_attempts",
    """
SELECT * FROM (
    SELECT e.job_id, e.id, e.generation, e.attempt, e.status, e.worker_id, CAST(e.request AS text) AS request,
           CAST(e.response AS text) AS response, e.error, e.error_code, e.due_at, e.started_at, e.finished_at,
           e.duration_ms
    FROM workflow_job_executions e WHERE e.job_id = ANY(CAST(:ids AS bigint[]))
      AND e.started_at >= CAST(:since AS timestamptz) AND e.started_at < now() + interval '1 hour'
    UNION ALL
    SELECT j.id, j.attempt_id, j.generation, j.attempts, 'running', j.worker_id, CAST(j.payload AS text), NULL,
           NULL, NULL, j.run_at, j.attempt_started_at, NULL, NULL
    FROM workflow_jobs j WHERE j.id = ANY(CAST(:ids AS bigint[])) AND j.status = 'running'
) a ORDER BY job_id, generation, attempt
""",
)


def _attempts(conn: Connection, jobs: Sequence[Any]) -> dict[int, list[dict[str, Any]]]:
    """Every attempt of the jobs (rows with ``id`` and ``created_at``), oldest first: the final ones, then
    a running job's open attempt."""
    out: dict[int, list[dict[str, Any]]] = {int(j.id): [] for j in jobs}
    if not jobs:
        return out
    since = min(j.created_at for j in jobs)
    rows = run(conn, _ATTEMPTS, {"ids": list(out), "since": since}).all()
    for r in rows:
        d = dict(r._mapping)
        job_id = d.pop("job_id")
        d["id"] = str(d["id"])
        d["request"] = jsonx.loads_exact_db(d["request"])
        d["response"] = jsonx.loads_exact_db(d["response"])
        out[job_id].append(d)
    return out


# a job's effect receipts: its own and its operation's
_RECEIPTS = query(
    "job_receipts",
    """
SELECT id, operation_key, step_key, job_id, generation, CAST(result AS text) AS result, created_at
FROM workflow_job_effects WHERE job_id = :id OR operation_key = :op
ORDER BY created_at, id
""",
)
_DETAIL = query(
    "job_detail", f"SELECT {DETAIL_COLUMNS} FROM workflow_jobs j WHERE j.id = :id AND {IN_NAMESPACE}"
)


def _receipts(conn: Connection, job_id: int, operation_key: str) -> list[dict[str, Any]]:
    rows = run(conn, _RECEIPTS, {"id": job_id, "op": operation_key}).all()
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
    row = run(conn, _DETAIL, {"id": job_id, "job_ns": namespace_id}).first()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    job = job_view(row)
    job["attempts_history"] = _attempts(conn, [row])[job_id]
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
# a trace's jobs in causal/time order, at most ``:limit`` (the trace index); with their documents or not
_CHAIN_SQL = """
SELECT {columns} FROM workflow_jobs j WHERE {trace} AND {ns}
ORDER BY j.created_at, j.id LIMIT :limit
"""
_CHAIN = query("trace_jobs", _CHAIN_SQL.format(columns=LIST_COLUMNS, trace=TRACE_IS, ns=IN_NAMESPACE))
_CHAIN_DETAIL = query(
    "trace_jobs_detail", _CHAIN_SQL.format(columns=DETAIL_COLUMNS, trace=TRACE_IS, ns=IN_NAMESPACE)
)


def chain(
    conn: Connection, trace_id: str, *, with_attempts: bool = False, namespace_id: str | None = None
) -> dict[str, Any]:
    """Jobs of ``trace_id`` in causal/time order (created_at, id), with linked instances: at most
    ``MAX_CHAIN_JOBS`` (``truncated`` says when more exist)."""
    rows = run(
        conn,
        _CHAIN_DETAIL if with_attempts else _CHAIN,
        {"trace_id": trace_id, "job_ns": namespace_id, "limit": MAX_CHAIN_JOBS + 1},
    ).all()
    if not rows:
        raise NotFound(f"no jobs with trace id {trace_id!r}")
    truncated = len(rows) > MAX_CHAIN_JOBS
    items = [job_view(r) for r in rows[:MAX_CHAIN_JOBS]]
    if with_attempts:
        attempts = _attempts(conn, rows[:MAX_CHAIN_JOBS])
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
