"""Conditional replay selection and failure clusters (SPEC L-OPS table, L-OPS-3).

One SQL normalization of ``last_error`` folds what varies between occurrences of one cause
(quoted strings, URL hosts, UUIDs, IPs, long hex ids, numbers), so one cause is one cluster. A
cluster's ``replay_conditions`` use the same normalization (``error_pattern``), so a replay with
them selects exactly the cluster's members that are still failed/dead."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Connection

from app.ledger.models import JOB_STATUS_TYPE, JOB_TYPE_TYPE, JOB_TYPES, trace_match_sql
from app.sql import Query, query, run

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


def _like(value: str) -> str:
    return "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


# The replay filter (alias ``j``): replayable statuses, and each other filter true when not given (its
# parameter NULL); the statements that hold it are planned with their values (``Query.planned_each_time``).
# Age is time in the ledger; a type outside the enum type matches no job.
WHERE = f"""j.status = ANY(CAST(:statuses AS {JOB_STATUS_TYPE}[]))
  AND (CAST(:types AS {JOB_TYPE_TYPE}[]) IS NULL OR j.type = ANY(CAST(:types AS {JOB_TYPE_TYPE}[])))
  AND (CAST(:job_ns AS text) IS NULL
       OR j.instance_id IN (SELECT wi.id FROM workflow_instances wi WHERE wi.namespace_id = :job_ns))
  AND (CAST(:instance_id AS text) IS NULL OR j.instance_id = :instance_id)
  AND (CAST(:trace_id AS text) IS NULL OR ({trace_match_sql("j.trace_id", "trace_id")}))
  AND (CAST(:kw AS text) IS NULL OR j.last_error ILIKE :kw ESCAPE '\\')
  AND (CAST(:pattern AS text) IS NULL OR {NORMALIZED} = :pattern)
  AND (CAST(:min_age AS int) IS NULL OR j.created_at <= now() - make_interval(secs => :min_age))
  AND (CAST(:max_age AS int) IS NULL OR j.created_at >= now() - make_interval(secs => :max_age))"""


def where_params(f: ReplayFilter) -> dict[str, Any]:
    """The parameters of ``WHERE`` for ``f``."""
    return {
        "statuses": [s for s in f.statuses if s in REPLAYABLE] or list(REPLAYABLE),
        "types": [t for t in f.types if t in JOB_TYPES] if f.types else None,
        "job_ns": f.namespace_id,
        "instance_id": f.instance_id or None,
        "trace_id": f.trace_id or None,
        "kw": _like(f.error_keyword) if f.error_keyword else None,
        "pattern": f.error_pattern,
        "min_age": f.min_age_seconds,
        "max_age": f.max_age_seconds,
    }


_COUNT = query("replay_count", f"SELECT count(*) FROM workflow_jobs j WHERE {WHERE}", planned_each_time=True)
# the replay order: oldest first
_SAMPLE = query(
    "replay_sample",
    f"""
SELECT j.id, j.type, j.status, j.instance_id, j.trace_id, j.attempts, j.generation, j.last_error,
       j.error_code, j.created_at, j.finished_at
FROM workflow_jobs j WHERE {WHERE} ORDER BY j.created_at, j.id LIMIT :sample""",
    planned_each_time=True,
)
_LOCK = query(
    "replay_lock",
    f"SELECT j.id FROM workflow_jobs j WHERE {WHERE} ORDER BY j.created_at, j.id LIMIT :lim FOR UPDATE SKIP LOCKED",
    planned_each_time=True,
)


def preview(conn: Connection, f: ReplayFilter, *, sample_size: int = 20) -> dict[str, Any]:
    """Count and a sample (oldest first, the replay order); changes nothing."""
    params = where_params(f)
    count = run(conn, _COUNT, params).scalar_one()
    rows = run(conn, _SAMPLE, {**params, "sample": sample_size}).all()
    sample = [{**dict(r._mapping), "id": str(r.id)} for r in rows]
    return {"count": int(count), "sample": sample, "conditions": f.as_dict()}


def select_for_replay(conn: Connection, f: ReplayFilter, *, limit: int) -> tuple[list[int], int]:
    """Lock up to ``limit`` matching jobs (oldest first, SKIP LOCKED); also return the total match."""
    params = where_params(f)
    total = run(conn, _COUNT, params).scalar_one()
    ids = run(conn, _LOCK, {**params, "lim": limit}).scalars()
    return list(ids), int(total)


_COLUMN = {"reason": "reason", "type": "type", "instance": "instance_id", "trace": "trace_id"}


def _clusters_query(dims: tuple[str, ...]) -> Query:
    keys = ", ".join(_COLUMN[d] for d in dims)
    return query(
        "replay_clusters_by_" + "_".join(dims),
        f"""
WITH failed AS (
    SELECT j.id, j.type, j.instance_id, j.trace_id, j.status, j.last_error,
           COALESCE(j.finished_at, j.updated_at) AS seen_at, {NORMALIZED} AS reason
    FROM workflow_jobs j WHERE {WHERE}
)
SELECT {keys}, count(*) AS count, min(seen_at) AS first_seen, max(seen_at) AS last_seen,
       count(*) FILTER (WHERE status = 'dead') AS dead, count(*) FILTER (WHERE status = 'failed') AS failed,
       (array_agg(DISTINCT last_error))[1:CAST(:samples AS int)] AS sample_errors,
       (array_agg(id ORDER BY seen_at DESC, id DESC))[1:5] AS sample_job_ids,
       count(*) OVER () AS cluster_count
FROM failed GROUP BY {keys}
ORDER BY count(*) DESC, max(seen_at) DESC
LIMIT :lim""",
        planned_each_time=True,
    )


# one statement per set of dimensions (the reason always among them), in ``CLUSTER_DIMENSIONS`` order
_CLUSTERS = {
    dims: _clusters_query(dims)
    for dims in (
        ("reason", *(d for d, on in zip(CLUSTER_DIMENSIONS[1:], bits, strict=True) if on))
        for bits in itertools.product((False, True), repeat=len(CLUSTER_DIMENSIONS) - 1)
    )
}


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
    f = ReplayFilter(
        statuses=statuses, types=types, instance_id=instance_id, trace_id=trace_id, namespace_id=namespace_id
    )
    rows = run(conn, _CLUSTERS[dims], {**where_params(f), "lim": limit, "samples": int(samples)}).all()
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
