"""Pinned-version start (W-START) and instance reads (W-START-4, GET /v1/workflows)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from app import cursor as cursors
from app import jsonx
from app.engine import advance, settings, work
from app.engine.contracts import input_errors
from app.engine.definitions import load_version
from app.engine.documents import VERSION_RE
from app.engine.store import MISSING, read_instance
from app.engine.transitions import instances as inst_moves
from app.engine.transitions import steps as step_moves
from app.errors import FieldError, InvalidArgument, LimitExceeded, QuotaExceeded
from app.ids import is_hex32, new_id
from app.jsonx import rfc3339
from app.sql import run

MAX_INPUT_BYTES = 256 * 1024
MAX_BUSINESS_KEY = 191
START_FIELDS = {"definition_id", "version", "input", "business_key"}


def validate_start(body: Any) -> dict:
    """W-START-1..3 field rules (before any database read)."""
    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be a JSON object", field="$")
    errors: list[FieldError] = [FieldError(k, "unknown field") for k in body if k not in START_FIELDS]
    def_id = body.get("definition_id")
    if "definition_id" not in body:
        errors.append(FieldError("definition_id", "required"))
    elif not isinstance(def_id, str) or not is_hex32(def_id):
        errors.append(FieldError("definition_id", "must be a 32-char lowercase hex definition id"))
    version = body.get("version")
    if "version" not in body:
        errors.append(FieldError("version", "required"))
    elif not isinstance(version, str) or not VERSION_RE.fullmatch(version):
        errors.append(
            FieldError("version", "1-64 ASCII characters: a letter or digit first, then also _ . -")
        )
    elif version.lower() == "latest":
        errors.append(FieldError("version", 'a pinned version is required; "latest" is never resolved'))
    if "input" not in body:
        errors.append(FieldError("input", "required (explicit null is a value; a missing field is not)"))
    else:
        raw = jsonx.dumps(body["input"])
        if len(raw.encode("utf-8")) > MAX_INPUT_BYTES:
            errors.append(FieldError("input", f"at most {MAX_INPUT_BYTES} bytes of JSON"))
        elif "\\u0000" in raw or "\x00" in raw:
            errors.append(FieldError("input", "NUL characters cannot be stored"))
    bk = body.get("business_key", "")
    if not isinstance(bk, str):
        errors.append(FieldError("business_key", "must be a string"))
    elif len(bk) > MAX_BUSINESS_KEY:
        errors.append(FieldError("business_key", f"at most {MAX_BUSINESS_KEY} Unicode characters"))
    elif "\x00" in bk:
        errors.append(FieldError("business_key", "must not contain NUL"))
    if errors:
        raise InvalidArgument(errors=errors)
    return {"definition_id": def_id, "version": version, "input": body["input"], "business_key": bk}


def start_workflow(
    conn: Connection,
    namespace_id: str,
    body: Any,
    *,
    check_queues: Callable[[list[str]], None] | None = None,
    trace_id: str | None = None,
    parent: tuple[str, str] | None = None,
    on_created: Callable[[Connection, dict], None] | None = None,
    schedule: tuple[str, datetime] | None = None,
) -> dict:
    """Create the instance, its steps, the first activations / tasks and their ledger jobs, all in
    the caller's transaction (W-START-6); wake hints go out after its commit. ``on_created`` runs
    once the instance row exists, before its first activations (the start audit row comes first).
    ``schedule``: (schedule id, fire time) of a scheduled launch (X-SCHED), recorded on the instance."""
    req = validate_start(body)
    ver = load_version(conn, namespace_id, req["definition_id"], req["version"])
    if check_queues is not None:
        check_queues(ver["queues"])
    doc = ver["document"]
    errors = input_errors(doc["input_schema"], req["input"])
    if errors:
        raise InvalidArgument("input does not satisfy the pinned version's input contract", errors=errors)
    iid = new_id()
    inst = inst_moves.create(
        conn,
        {
            "id": iid,
            "ns": namespace_id,
            "def": ver["definition_id"],
            "ver": ver["id"],
            "version": ver["version"],
            "input": jsonx.dumps(req["input"]),
            "bk": req["business_key"],
            "queues": ver["queues"],
            "deadline": doc["deadline_seconds"],
            "trace": trace_id or new_id(),
            "parent": parent[0] if parent else None,
            "parent_step": parent[1] if parent else None,
            "schedule": schedule[0] if schedule else None,
            "schedule_fire_at": schedule[1] if schedule else None,
        },
    )
    step_moves.insert_all(conn, iid, doc["steps"])
    if on_created is not None:
        on_created(conn, inst)
    work.wake(conn, inst, "deadline", key=f"deadline:{iid}", run_at=inst["deadline_at"])
    started = advance.settle_progress(
        conn, iid, inst
    )  # the audit and the deadline job left the row as it was
    check_quotas(conn, namespace_id, ver["queues"])
    return started


# The quota figures of one start in one statement, run right after the namespace's start lock is granted
# (a separate statement: READ COMMITTED takes the snapshot at a statement's start, so only a statement that
# begins after the lock sees every start committed before it). The counts are the committed sums of
# ``workflow_quota_counts`` (migration 0017: kept by deferred triggers at each commit, so this start's own
# instance and tasks are not in them yet), plus, per queue, the CLAIMED tasks whose lease expired (pending
# again; an index of claimed tasks only). One row per queue of the definition (queue NULL when it has none).
_QUOTA_COUNTS = text(
    """
SELECT q.queue,
       COALESCE((SELECT sum((c.pending ->> q.queue)::bigint) FROM workflow_quota_counts c
                 WHERE c.namespace_id = :ns), 0)
       + (SELECT count(*) FROM workflow_tasks t
          WHERE t.namespace_id = :ns AND t.queue = q.queue AND t.state = 'CLAIMED'
            AND t.lease_expires_at <= now()) AS pending,
       u.unfinished, u.open_tasks
FROM (SELECT COALESCE(sum(unfinished), 0) AS unfinished, COALESCE(sum(open_tasks), 0) AS open_tasks
      FROM workflow_quota_counts WHERE namespace_id = :ns) u
LEFT JOIN unnest(CAST(:queues AS text[])) WITH ORDINALITY AS q(queue, n) ON true
ORDER BY q.n
"""
)


def check_quotas(conn: Connection, namespace_id: str, queues: list[str]) -> None:
    """The namespace's quotas, checked LAST in the start's transaction: the namespace's start lock is
    taken only now, so concurrent starts do their work in parallel and serialize only for this one
    statement over a few counter rows and their commit. Under the lock every start committed before is
    counted and this start's own rows are not (their counts are added when it commits), so the answer is
    exactly what a check before the work would give: never above the caps. A finishing instance or task
    whose transaction has not committed yet still counts: the check errs on the safe side.

    In order: unfinished instances (WORKFLOW_INSTANCE_LIMIT), then W-ERR quotas for new work (429 with
    Retry-After): pending tasks per queue (QUEUE_FULL; a CLAIMED task whose lease expired is pending
    again), then unfinished work of the application = the credential's namespace (APPLICATION_FULL):
    unfinished instances plus open (PENDING or CLAIMED) tasks."""
    run(conn, "SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))", {"k": "lf-ns:" + namespace_id})
    rows = run(conn, _QUOTA_COUNTS, {"ns": namespace_id, "queues": list(queues)}).all()
    unfinished, open_tasks = rows[0].unfinished, rows[0].open_tasks
    if unfinished >= settings.instance_limit():
        raise LimitExceeded(
            "WORKFLOW_INSTANCE_LIMIT",
            f"the namespace has {settings.instance_limit()} unfinished workflow instances (the limit)",
        )
    retry_after = settings.quota_retry_after_seconds()
    for r in rows:
        if r.queue is not None and r.pending >= settings.queue_pending_limit():
            raise QuotaExceeded(
                "QUEUE_FULL",
                retry_after=retry_after,
                message=f"queue {r.queue!r} has {r.pending} pending tasks (the quota is "
                f"{settings.queue_pending_limit()}); retry later with the same Idempotency-Key",
            )
    if unfinished + open_tasks >= settings.application_work_limit():
        raise QuotaExceeded(
            "APPLICATION_FULL",
            retry_after=retry_after,
            message=f"the application has {unfinished + open_tasks} units of unfinished work (unfinished "
            f"workflows plus open tasks; the quota is {settings.application_work_limit()}); retry later "
            "with the same Idempotency-Key",
        )


# The counters against the rows, per namespace (one statement, so one snapshot: a transaction's rows and
# its counter changes commit together, and any difference is drift, not a race). Drift comes only from
# writes that bypass row triggers: TRUNCATE, ``session_replication_role = replica``, triggers disabled.
_QUOTA_TRUTH = """
truth AS (
    SELECT namespace_id, 'unfinished' AS what, count(*) AS n FROM workflow_instances
    WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') GROUP BY namespace_id
    UNION ALL
    SELECT namespace_id, 'open_tasks', count(*) FROM workflow_tasks
    WHERE state IN ('PENDING', 'CLAIMED') GROUP BY namespace_id
    UNION ALL
    SELECT namespace_id, 'pending:' || queue, count(*) FROM workflow_tasks
    WHERE state = 'PENDING' GROUP BY namespace_id, queue
)"""
_QUOTA_DRIFT = text(
    f"""
WITH {_QUOTA_TRUTH},
kept AS (
    SELECT namespace_id, 'unfinished' AS what, sum(unfinished) AS n FROM workflow_quota_counts GROUP BY namespace_id
    UNION ALL
    SELECT namespace_id, 'open_tasks', sum(open_tasks) FROM workflow_quota_counts GROUP BY namespace_id
    UNION ALL
    SELECT c.namespace_id, 'pending:' || e.key, sum(e.value::bigint)
    FROM workflow_quota_counts c, jsonb_each_text(c.pending) AS e GROUP BY c.namespace_id, e.key
)
SELECT COALESCE(t.namespace_id, k.namespace_id) AS namespace_id, COALESCE(t.what, k.what) AS what,
       COALESCE(k.n, 0) AS kept, COALESCE(t.n, 0) AS counted
FROM truth t FULL JOIN kept k ON k.namespace_id = t.namespace_id AND k.what = t.what
WHERE COALESCE(k.n, 0) <> COALESCE(t.n, 0)
ORDER BY 1, 2
LIMIT :limit
"""
)


def quota_count_drift(conn: Connection, limit: int = 20) -> list[dict[str, Any]]:
    """Where ``workflow_quota_counts`` differs from the rows (``ledgerflow doctor``): at most ``limit``
    (namespace, figure, kept, counted) rows; none when the counters are right."""
    return [dict(r._mapping) for r in run(conn, _QUOTA_DRIFT, {"limit": limit})]


def repair_quota_counts(conn: Connection) -> int:
    """Recount every namespace's quota figures from the rows (``ledgerflow db repair-quota-counts``).
    Locks the instance and task tables against writers until ``conn``'s transaction ends (readers go
    on), so that no change commits between the recount and its counters. Returns the namespaces kept."""
    run(conn, "LOCK TABLE workflow_instances, workflow_tasks IN SHARE MODE")
    run(conn, "DELETE FROM workflow_quota_counts")
    return run(
        conn,
        f"""
WITH {_QUOTA_TRUTH}
INSERT INTO workflow_quota_counts (namespace_id, stripe, unfinished, open_tasks, pending)
SELECT namespace_id, 0,
       COALESCE(sum(n) FILTER (WHERE what = 'unfinished'), 0),
       COALESCE(sum(n) FILTER (WHERE what = 'open_tasks'), 0),
       COALESCE(jsonb_object_agg(substr(what, 9), n) FILTER (WHERE what LIKE 'pending:%'), '{{}}'::jsonb)
FROM truth GROUP BY namespace_id
""",
    ).rowcount


def instance_view(inst: dict) -> dict:
    """The W-START-4 instance object: optional fields only when they have values."""
    out: dict[str, Any] = {
        "id": inst["id"],
        "namespace_id": inst["namespace_id"],
        "definition_id": inst["definition_id"],
        "definition_version_id": inst["definition_version_id"],
        "version": inst["version"],
        "state": inst["state"],
        "revision": str(inst["revision"]),
        "paused": inst["paused"],
        "control_revision": str(inst["control_revision"]),
        "input": inst["input"],
        "business_key": inst["business_key"],
        "deadline_at": rfc3339(inst["deadline_at"]),
        "created_at": rfc3339(inst["created_at"]),
        "updated_at": rfc3339(inst["updated_at"]),
    }
    if inst["output"] is not MISSING:
        out["output"] = inst["output"]
    for k in ("cancel_requested_at", "stop_requested_at", "completed_at"):
        if inst[k] is not None:
            out[k] = rfc3339(inst[k])
    if inst["stop_kind"]:
        out["stop_kind"] = inst["stop_kind"]
    if inst.get("schedule_id"):
        out["schedule_id"] = inst["schedule_id"]
        out["schedule_fire_at"] = rfc3339(inst["schedule_fire_at"])
    return out


# -- list -----------------------------------------------------------------------------------------
STATES = ("RUNNING", "WAITING", "CANCELLING", "NEEDS_REVIEW", "SUCCEEDED", "FAILED", "CANCELLED")
TIME_FILTERS = {
    "created_after": "created_at >= :created_after",
    "created_before": "created_at < :created_before",
    "updated_after": "updated_at >= :updated_after",
    "updated_before": "updated_at < :updated_before",
    "deadline_before": "deadline_at < :deadline_before",
}


def _list_where(
    namespace_id: str, filters: dict[str, Any], allowed_queues: tuple[str, ...] | None
) -> tuple[list[str], dict[str, Any]]:
    """The list's conditions (the API's filters, the credential's queue scope) and their parameters."""
    where = ["namespace_id = :ns"]
    params: dict[str, Any] = {"ns": namespace_id}
    for k in ("state", "paused", "definition_id", "version", "business_key", "schedule_id"):
        if k in filters:
            where.append(f"{k} = :{k}")
            params[k] = filters[k]
    if "business_key_prefix" in filters:
        where.append("left(business_key, char_length(:bkp)) = :bkp")
        params["bkp"] = filters["business_key_prefix"]
    for k, cond in TIME_FILTERS.items():
        if k in filters:
            where.append(cond)
            params[k] = filters[k]
    if allowed_queues is not None:
        where.append("queues <@ CAST(:allowed AS text[])")
        params["allowed"] = list(allowed_queues)
    return where, params


def count_instances(
    conn: Connection,
    namespace_id: str,
    filters: dict[str, Any],
    allowed_queues: tuple[str, ...] | None,
    cap: int,
) -> int:
    """How many instances ``list_instances`` would page through, counted up to ``cap + 1``."""
    where, params = _list_where(namespace_id, filters, allowed_queues)
    params["cap"] = cap + 1
    sql = f"SELECT count(*) FROM (SELECT 1 FROM workflow_instances WHERE {' AND '.join(where)} LIMIT :cap) t"
    return int(run(conn, sql, params).scalar_one())


def list_instances(
    conn: Connection,
    namespace_id: str,
    filters: dict[str, Any],
    limit: int,
    cursor: str | None,
    allowed_queues: tuple[str, ...] | None,
) -> dict:
    where, params = _list_where(namespace_id, filters, allowed_queues)
    params["limit"] = limit + 1
    binding = {"ns": namespace_id, "filters": {k: str(v) for k, v in sorted(filters.items())}}
    if cursor is not None:
        pos = cursors.decode(cursor, binding)
        created, last_id = cursors.parse_time(pos.get("c")), str(pos.get("i"))
        where.append("(created_at, id) < (:c_created, :c_id)")
        params.update(c_created=created, c_id=last_id)
    rows = run(
        conn,
        "SELECT id FROM workflow_instances WHERE "
        + " AND ".join(where)
        + " ORDER BY created_at DESC, id DESC "
        "LIMIT :limit",
        params,
    ).all()
    items = [read_instance(conn, r.id) for r in rows[:limit]]
    out: dict[str, Any] = {"items": [instance_view(i) for i in items]}
    if len(rows) > limit:
        last = items[-1]
        out["next_cursor"] = cursors.encode({"c": last["created_at"].isoformat(), "i": last["id"]}, binding)
    return out
