"""Operator lookups across resources (the console's search box, namespace names and switcher, counts):
what an id or a key names, in which namespace, within what the caller may read. Every read is bounded
(a limit, or a count that stops at ``cap``) and served by an index.

Visibility follows the API: ``namespace_id`` None means every namespace (a platform-wide operator's
view of the ledger), else only that namespace's rows; a job without an instance belongs to the
platform (``app.ledger.job_reads.in_namespace``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from app.db_time import local_statement_timeout
from app.engine.row_access import read_instance
from app.errors import NotFound
from app.ids import is_hex32
from app.ledger import job_reads
from app.sql import query, run

MAX_NAMESPACES = 500
SEARCH_LIMIT = 20


_LOOKUP_NAMESPACES = query(
    "lookup_namespaces",
    "SELECT id, name FROM namespaces ORDER BY name LIMIT :n",
)


def namespaces(conn: Connection, limit: int = MAX_NAMESPACES) -> list[dict[str, str]]:
    """Every namespace by name (the platform operator's switcher), at most ``limit``."""
    rows = run(conn, _LOOKUP_NAMESPACES, {"n": limit})
    return [{"id": r.id, "name": r.name} for r in rows]


_LOOKUP_NAMESPACE_BY_NAME = query(
    "lookup_namespace_by_name",
    "SELECT id, name FROM namespaces WHERE name = :n",
)


def namespace_by_name(conn: Connection, name: str) -> dict[str, str]:
    row = run(conn, _LOOKUP_NAMESPACE_BY_NAME, {"n": name[:64]}).first()
    if row is None:
        raise NotFound("no such namespace")
    return {"id": row.id, "name": row.name}


_LOOKUP_INSTANCE_NAMESPACES = query(
    "lookup_instance_namespaces",
    "SELECT i.id, i.namespace_id, n.name FROM workflow_instances i JOIN namespaces n ON n.id = i.namespace_id "
    "WHERE i.id = ANY(CAST(:ids AS text[]))",
)


def instance_namespaces(conn: Connection, instance_ids: Iterable[str | None]) -> dict[str, dict[str, str]]:
    """``{instance id: {"namespace_id", "namespace"}}`` of the given instances (ids that name no
    instance are left out); one statement for a page of rows."""
    ids = sorted({i for i in instance_ids if i and is_hex32(i)})
    if not ids:
        return {}
    rows = run(
        conn,
        _LOOKUP_INSTANCE_NAMESPACES,
        {"ids": ids},
    )
    return {r.id: {"namespace_id": r.namespace_id, "namespace": r.name} for r in rows}


_LOOKUP_DEFINITION_NAMES = query(
    "lookup_definition_names",
    "SELECT id, name FROM workflow_definitions WHERE id = ANY(CAST(:ids AS text[]))",
)


def definition_names(conn: Connection, definition_ids: Iterable[str]) -> dict[str, str]:
    """``{definition id: name}`` for a page of rows (one statement)."""
    ids = sorted({i for i in definition_ids if i and is_hex32(i)})
    if not ids:
        return {}
    rows = run(
        conn,
        _LOOKUP_DEFINITION_NAMES,
        {"ids": ids},
    )
    return {r.id: r.name for r in rows}


NAMES_MAX = 500  # the definition names a filter offers (the console's workflow list)

DEFINITION_NAMES_OF_NAMESPACE = query(
    "lookup_definition_names_of_namespace",
    "SELECT name FROM workflow_definitions WHERE namespace_id = :ns ORDER BY name LIMIT :limit",
)
DEFINITION_BY_NAME_OR_ID = query(
    "lookup_definition_by_name_or_id",
    "SELECT id, name FROM workflow_definitions WHERE namespace_id = :ns AND (name = :v OR id = :v) "
    "ORDER BY (name = :v) DESC LIMIT 1",
)


def namespace_definition_names(conn: Connection, namespace_id: str, limit: int = NAMES_MAX) -> list[str]:
    """The first ``limit`` definition names of a namespace in name order (a filter's choices; the unique
    ``(namespace_id, name)`` index serves it)."""
    return list(run(conn, DEFINITION_NAMES_OF_NAMESPACE, {"ns": namespace_id, "limit": limit}).scalars())


def definition_by_name_or_id(conn: Connection, namespace_id: str, value: str) -> dict[str, str] | None:
    """``{id, name}`` of the namespace's definition named ``value`` (names are unique in a namespace), or
    whose id it is; a name wins over an id. None when neither (one statement, by index)."""
    row = run(conn, DEFINITION_BY_NAME_OR_ID, {"ns": namespace_id, "v": value}).first()
    return None if row is None else {"id": row.id, "name": row.name}


_LOOKUP_EVENT_BATCH_INSTANCES = query(
    "lookup_event_batch_instances",
    "SELECT id, instance_id FROM workflow_event_batches WHERE namespace_id = :ns AND id = ANY(CAST(:ids AS text[]))",
)


def event_workflows(conn: Connection, namespace_id: str, event_ids: Iterable[str | None]) -> dict[str, str]:
    """``{event id: workflow id}`` of the namespace's events (``app.engine.events``: an event id is its
    batch's id with a 3-hex ordinal, a batch is of one instance); ids that name no batch are left out.
    One statement by primary key for a page of rows."""
    ids = sorted({i for i in event_ids if i and is_hex32(i)})
    if not ids:
        return {}
    rows = run(
        conn,
        _LOOKUP_EVENT_BATCH_INSTANCES,
        {"ns": namespace_id, "ids": sorted({i[:29] + "000" for i in ids})},
    )
    batches = {r.id: r.instance_id for r in rows}
    return {i: batches[i[:29] + "000"] for i in ids if i[:29] + "000" in batches}


COUNT_BUDGET_MS = 150


_COUNT_JOBS = query(
    "jobs_count",
    f"SELECT count(*) FROM (SELECT 1 FROM workflow_jobs j WHERE {job_reads.FILTER_WHERE} LIMIT :n) t",
    planned_each_time=True,
)


def count_jobs(
    conn: Connection, f: job_reads.JobFilter, cap: int, budget_ms: int = COUNT_BUDGET_MS
) -> int | None:
    """How many jobs the list filter matches, counted up to ``cap + 1`` (more reads as "cap+"), or None
    when counting would take more than ``budget_ms`` of PostgreSQL time (a keyword over a million
    payloads): a savepoint with its own statement timeout, rolled back either way, so the caller's
    transaction and settings are untouched."""
    nested = conn.begin_nested()
    try:
        local_statement_timeout(conn, int(budget_ms))
        return int(run(conn, _COUNT_JOBS, {**job_reads.filter_params(f), "n": cap + 1}).scalar_one())
    except OperationalError as exc:
        if not isinstance(exc.orig, psycopg.errors.QueryCanceled):
            raise
        return None
    finally:
        nested.rollback()


_OPEN_TASKS_SQL = """
SELECT count(*) FROM (
    SELECT 1 FROM workflow_tasks WHERE namespace_id = :ns AND state IN ('PENDING', 'CLAIMED'){queues} LIMIT :n
) t
"""
_OPEN_TASKS = query("tasks_open_count", _OPEN_TASKS_SQL.format(queues=""))
_OPEN_TASKS_ON_QUEUES = query(
    "tasks_open_count_on_queues", _OPEN_TASKS_SQL.format(queues=" AND queue = ANY(CAST(:queues AS text[]))")
)


def count_open_tasks(conn: Connection, namespace_id: str, queues: tuple[str, ...] | None, cap: int) -> int:
    """Open (PENDING or CLAIMED) tasks of a namespace on ``queues`` (None: every queue), up to ``cap + 1``."""
    params: dict[str, Any] = {
        "ns": namespace_id,
        "n": cap + 1,
        "queues": None if queues is None else list(queues),
    }
    return int(run(conn, _OPEN_TASKS if queues is None else _OPEN_TASKS_ON_QUEUES, params).scalar_one())


def instance_for(conn: Connection, instance_id: str, namespace_id: str | None) -> dict[str, Any]:
    """An instance of ``namespace_id`` (None: of any namespace), else 404."""
    if not is_hex32(instance_id):
        raise NotFound("workflow not found")
    return read_instance(conn, instance_id, namespace_id)


# --------------------------------------------------------------------------- search
@dataclass(frozen=True)
class Hit:
    kind: str  # job, workflow, trace, definition (the console adds schedule, subscription, rule)
    id: str
    label: str
    namespace: str | None = None
    state: str | None = None


@dataclass(frozen=True)
class Reach:
    """What a search may look at, per kind (``None``: every namespace; a string: that namespace; a kind
    missing from ``kinds`` is not searched)."""

    kinds: frozenset[str]
    job_namespace: str | None  # the ledger's view (app.ledger.job_reads.in_namespace)
    workflow_namespace: str | None  # instances (None: every namespace, a platform-wide reader)
    namespace_id: str  # the credential's own namespace (definitions, tasks, schedules, integrations)


# the engine's resources found by id in the credential's own namespace: a statement of each kind's
# (id, label, state)
_BY_ID = {
    "definition": query(
        "lookup_definition_by_id",
        "SELECT id, name AS label, NULL AS state FROM workflow_definitions WHERE id = :id AND namespace_id = :ns",
    )
}


_LOOKUP_INSTANCE_SEARCH = query(
    "lookup_instance_search",
    "SELECT i.id, i.state, n.name AS ns FROM workflow_instances i JOIN namespaces n ON n.id = i.namespace_id "
    "WHERE i.business_key = :bk AND (CAST(:ns AS text) IS NULL OR i.namespace_id = :ns) "
    "ORDER BY i.created_at DESC LIMIT :n",
)


_JOB_BY_ID = query(
    "lookup_job_by_id",
    f"SELECT j.id, CAST(j.type AS text) AS type, CAST(j.status AS text) AS status FROM workflow_jobs j "
    f"WHERE j.id = :id AND {job_reads.IN_NAMESPACE}",
)
_TRACE_FIRST_JOB = query(
    "lookup_trace_first_job",
    f"SELECT j.id FROM workflow_jobs j WHERE {job_reads.TRACE_IS} AND {job_reads.IN_NAMESPACE} LIMIT 1",
)


def search(conn: Connection, term: str, reach: Reach, limit: int = SEARCH_LIMIT) -> list[Hit]:
    """What ``term`` names in the engine and the ledger: a job id, a workflow or definition id, a
    trace id (its jobs) or a business key, within ``reach``; at most ``limit`` hits, exact matches only
    (each an index lookup). Schedules, subscriptions and rules are found by their own modules."""
    term = term.strip()
    if not term or len(term) > 256 or "\x00" in term:
        return []
    hits: list[Hit] = []
    job_id = job_reads.parse_job_id(term)
    if job_id is not None and "job" in reach.kinds:
        row = run(conn, _JOB_BY_ID, {"id": job_id, "job_ns": reach.job_namespace}).first()
        if row is not None:
            hits.append(Hit("job", str(row.id), str(row.type), state=str(row.status)))
    if is_hex32(term):
        hits += _by_id(conn, term, reach)
    if "trace" in reach.kinds:
        row = run(conn, _TRACE_FIRST_JOB, {"trace_id": term, "job_ns": reach.job_namespace}).first()
        if row is not None:
            hits.append(Hit("trace", term, "trace chain"))
    if "workflow" in reach.kinds and len(term) <= 191:
        rows = run(
            conn,
            _LOOKUP_INSTANCE_SEARCH,
            {"bk": term, "ns": reach.workflow_namespace, "n": limit},
        )
        hits += [Hit("workflow", r.id, f"business key {term}", r.ns, r.state) for r in rows]
    return hits[:limit]


_LOOKUP_INSTANCE_BY_ID = query(
    "lookup_instance_by_id",
    "SELECT i.id, i.state, n.name AS ns, d.name AS definition FROM workflow_instances i "
    "JOIN namespaces n ON n.id = i.namespace_id JOIN workflow_definitions d ON d.id = i.definition_id "
    "WHERE i.id = :id AND (CAST(:ns AS text) IS NULL OR i.namespace_id = :ns)",
)


def _by_id(conn: Connection, term: str, reach: Reach) -> list[Hit]:
    hits: list[Hit] = []
    if "workflow" in reach.kinds:
        row = run(
            conn,
            _LOOKUP_INSTANCE_BY_ID,
            {"id": term, "ns": reach.workflow_namespace},
        ).first()
        if row is not None:
            hits.append(Hit("workflow", row.id, row.definition, row.ns, row.state))
    for kind, statement in _BY_ID.items():
        if kind not in reach.kinds:
            continue
        row = run(conn, statement, {"id": term, "ns": reach.namespace_id}).first()
        if row is not None:
            hits.append(Hit(kind, row.id, str(row.label), state=row.state))
    return hits
