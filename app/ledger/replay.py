"""Conditional replay selection and failure clusters (SPEC L-OPS table, L-OPS-3).

One SQL normalization of ``last_error`` folds what varies between occurrences of one cause
(quoted strings, URL hosts, UUIDs, IPs, long hex ids, numbers), so one cause is one cluster. A
cluster's ``replay_conditions`` use the same normalization (``error_pattern``), so a replay with
them selects exactly the cluster's members that are still failed/dead."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Connection, text

from app.ledger.models import JOB_STATUS_TYPE, JOB_TYPE_TYPE, JOB_TYPES, trace_match_sql

REPLAYABLE = ("dead", "failed")
CLUSTER_DIMENSIONS = ("reason", "type", "instance", "trace")


def normalized_error_sql(col: str) -> str:
    """SQL expression: the error text with its variable parts folded to placeholders."""
    e = f"COALESCE({col}, '')"
    steps = [
        (r"'[^']*'", "'<str>'"),
        (r'"[^"]*"', '"<str>"'),
        (r"([A-Za-z][A-Za-z0-9+.-]*)://[^/\s:?#]+(:[0-9]+)?", r"\1://<host>"),
        (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<id>"),
        (r"\m[0-9]{1,3}(\.[0-9]{1,3}){3}(:[0-9]+)?\M", "<ip>"),
        (r"\m(0x)?[0-9a-fA-F]{8,}\M", "<id>"),
        (r"[0-9]+(\.[0-9]+)?", "<n>"),
        (r"\s+", " "),
    ]
    for pattern, repl in steps:
        p = pattern.replace("'", "''")
        r = repl.replace("'", "''")
        e = f"regexp_replace({e}, E'{_esc(p)}', E'{_esc(r)}', 'g')"
    return f"left(btrim({e}), 300)"


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\")


NORMALIZED = normalized_error_sql("j.last_error")


@dataclass(frozen=True)
class ReplayFilter:
    statuses: tuple[str, ...] = REPLAYABLE
    types: tuple[str, ...] = ()
    instance_id: str | None = None
    trace_id: str | None = None
    error_keyword: str | None = None
    error_pattern: str | None = None
    min_age_seconds: int | None = None
    max_age_seconds: int | None = None
    namespace_id: str | None = None  # a namespace-scoped operator: only its namespace's instances' jobs

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("namespace_id")
        d["statuses"], d["types"] = list(self.statuses), list(self.types)
        return {k: v for k, v in d.items() if v not in (None, [])}


# the instances of one namespace (bound ``:job_ns``); a job without an instance belongs to the platform
NAMESPACE_INSTANCES = "SELECT wi.id FROM workflow_instances wi WHERE wi.namespace_id = :job_ns"


def _like(value: str) -> str:
    return "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def where_sql(f: ReplayFilter) -> tuple[str, dict[str, Any]]:
    """WHERE clause (alias ``j``) selecting replayable jobs by the filter; age = time in the ledger."""
    statuses = [s for s in f.statuses if s in REPLAYABLE] or list(REPLAYABLE)
    parts = [f"j.status = ANY(CAST(:statuses AS {JOB_STATUS_TYPE}[]))"]
    params: dict[str, Any] = {"statuses": statuses}
    if f.types:
        # a type outside the enum type matches no job (PostgreSQL would refuse to read it as the enum)
        parts.append(f"j.type = ANY(CAST(:types AS {JOB_TYPE_TYPE}[]))")
        params["types"] = [t for t in f.types if t in JOB_TYPES]
    if f.namespace_id is not None:
        parts.append(f"j.instance_id IN ({NAMESPACE_INSTANCES})")
        params["job_ns"] = f.namespace_id
    if f.instance_id:
        parts.append("j.instance_id = :instance_id")
        params["instance_id"] = f.instance_id
    if f.trace_id:
        parts.append(trace_match_sql("j.trace_id", "trace_id"))
        params["trace_id"] = f.trace_id
    if f.error_keyword:
        parts.append("j.last_error ILIKE :kw ESCAPE '\\'")
        params["kw"] = _like(f.error_keyword)
    if f.error_pattern is not None:
        parts.append(f"{NORMALIZED} = :pattern")
        params["pattern"] = f.error_pattern
    if f.min_age_seconds is not None:
        parts.append("j.created_at <= now() - make_interval(secs => :min_age)")
        params["min_age"] = f.min_age_seconds
    if f.max_age_seconds is not None:
        parts.append("j.created_at >= now() - make_interval(secs => :max_age)")
        params["max_age"] = f.max_age_seconds
    return " AND ".join(parts), params


def preview(conn: Connection, f: ReplayFilter, *, sample_size: int = 20) -> dict[str, Any]:
    """Count and a sample (oldest first, the replay order); changes nothing."""
    where, params = where_sql(f)
    count = conn.execute(text(f"SELECT count(*) FROM workflow_jobs j WHERE {where}"), params).scalar_one()
    rows = conn.execute(
        text(
            f"""
SELECT j.id, j.type, j.status, j.instance_id, j.trace_id, j.attempts, j.generation, j.last_error,
       j.error_code, j.created_at, j.finished_at
FROM workflow_jobs j WHERE {where} ORDER BY j.created_at, j.id LIMIT :sample"""
        ),
        {**params, "sample": sample_size},
    ).all()
    sample = [{**dict(r._mapping), "id": str(r.id)} for r in rows]
    return {"count": int(count), "sample": sample, "conditions": f.as_dict()}


def select_for_replay(conn: Connection, f: ReplayFilter, *, limit: int) -> tuple[list[int], int]:
    """Lock up to ``limit`` matching jobs (oldest first, SKIP LOCKED); also return the total match."""
    where, params = where_sql(f)
    total = conn.execute(text(f"SELECT count(*) FROM workflow_jobs j WHERE {where}"), params).scalar_one()
    ids = conn.execute(
        text(
            f"SELECT j.id FROM workflow_jobs j WHERE {where} ORDER BY j.created_at, j.id "
            "LIMIT :lim FOR UPDATE SKIP LOCKED"
        ),
        {**params, "lim": limit},
    ).scalars()
    return list(ids), int(total)


def failure_clusters(
    conn: Connection,
    *,
    group_by: tuple[str, ...] = ("reason", "type"),
    types: tuple[str, ...] = (),
    statuses: tuple[str, ...] = REPLAYABLE,
    instance_id: str | None = None,
    trace_id: str | None = None,
    limit: int = 20,
    samples: int = 3,
    namespace_id: str | None = None,
) -> dict[str, Any]:
    """Failed/dead jobs grouped by the chosen dimensions (always including the normalized reason),
    largest first; each with count, first/last seen, sample member errors and job ids, and the
    replay conditions that select it."""
    dims = tuple(d for d in CLUSTER_DIMENSIONS if d in set(group_by) | {"reason"})
    col = {"reason": "reason", "type": "type", "instance": "instance_id", "trace": "trace_id"}
    f = ReplayFilter(
        statuses=statuses, types=types, instance_id=instance_id, trace_id=trace_id, namespace_id=namespace_id
    )
    where, params = where_sql(f)
    keys = ", ".join(col[d] for d in dims)
    rows = conn.execute(
        text(
            f"""
WITH failed AS (
    SELECT j.id, j.type, j.instance_id, j.trace_id, j.status, j.last_error,
           COALESCE(j.finished_at, j.updated_at) AS seen_at, {NORMALIZED} AS reason
    FROM workflow_jobs j WHERE {where}
)
SELECT {keys}, count(*) AS count, min(seen_at) AS first_seen, max(seen_at) AS last_seen,
       count(*) FILTER (WHERE status = 'dead') AS dead, count(*) FILTER (WHERE status = 'failed') AS failed,
       (array_agg(DISTINCT last_error))[1:{int(samples)}] AS sample_errors,
       (array_agg(id ORDER BY seen_at DESC, id DESC))[1:5] AS sample_job_ids,
       count(*) OVER () AS cluster_count
FROM failed GROUP BY {keys}
ORDER BY count(*) DESC, max(seen_at) DESC
LIMIT :lim"""
        ),
        {**params, "lim": limit},
    ).all()
    clusters = []
    for r in rows:
        m = r._mapping
        conditions: dict[str, Any] = {"statuses": list(f.statuses), "error_pattern": m["reason"]}
        if "type" in dims:
            conditions["types"] = [m["type"]]
        elif types:
            conditions["types"] = list(types)
        if "instance" in dims and m["instance_id"] is not None:
            conditions["instance_id"] = m["instance_id"]
        elif instance_id:
            conditions["instance_id"] = instance_id
        if "trace" in dims:
            conditions["trace_id"] = m["trace_id"]
        elif trace_id:
            conditions["trace_id"] = trace_id
        clusters.append(
            {
                "reason": m["reason"],
                "type": m.get("type"),
                "instance_id": m.get("instance_id"),
                "trace_id": m.get("trace_id"),
                "count": int(m["count"]),
                "dead": int(m["dead"]),
                "failed": int(m["failed"]),
                "first_seen": m["first_seen"],
                "last_seen": m["last_seen"],
                "sample_errors": [e for e in (m["sample_errors"] or []) if e is not None],
                "sample_job_ids": [str(i) for i in m["sample_job_ids"]],
                "replay_conditions": conditions,
            }
        )
    total = int(rows[0]._mapping["cluster_count"]) if rows else 0
    return {"group_by": list(dims), "clusters": clusters, "cluster_count": total}
