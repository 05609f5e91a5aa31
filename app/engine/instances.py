"""Pinned-version start (W-START) and instance reads (W-START-4, GET /v1/workflows)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app import cursor as cursors
from app import jsonx
from app.engine import driver, finding, jobs_and_tasks, quotas
from app.engine.contracts import input_errors
from app.engine.definitions import load_version
from app.engine.documents import VERSION_RE
from app.engine.row_access import MISSING, read_instance
from app.engine.states import TERMINAL
from app.engine.transitions import instance_moves, step_moves
from app.errors import FieldError, InvalidArgument
from app.ids import is_hex32, new_id
from app.jsonx import rfc3339
from app.sql import Query, query, run

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
    element: tuple[str, int] | None = None,
    on_created: Callable[[Connection, dict], None] | None = None,
    schedule: tuple[str, datetime] | None = None,
    automation_chain: list[str] | None = None,
    start_key: tuple[str, str] | None = None,
    seed_steps: Callable[[Connection, dict, dict[str, dict]], dict[str, dict]] | None = None,
) -> dict:
    """Create the instance, its steps, the first activations / tasks and their ledger jobs, all in
    the caller's transaction (W-START-6); wake hints go out after its commit. ``on_created`` runs
    once the instance row exists, before its first activations (the start audit row comes first).
    ``element``: (the parent step's activation id, the element index) of a fan-out's child.
    ``schedule``: (schedule id, fire time) of a scheduled launch (X-SCHED), recorded on the instance;
    ``automation_chain``: the automation rules that started it (X-AUTO), likewise; ``start_key``: the
    (Idempotency-Key, fingerprint) of the start request, kept on the row (``app.engine.start_keys``),
    which fails on the key's unique index when a duplicate holds it. ``seed_steps``: a rerun's copied steps,
    written after ``on_created``; returns the step rows by key as they then are. The instance row is
    inserted as the start settles it and written at most once more (``driver.make_progress``)."""
    req = validate_start(body)
    ver = load_version(conn, namespace_id, req["definition_id"], req["version"])
    if check_queues is not None:
        check_queues(ver["queues"])
    doc = ver["document"]
    errors = input_errors(doc["input_schema"], req["input"])
    if errors:
        raise InvalidArgument("input does not satisfy the pinned version's input contract", errors=errors)
    iid = new_id()
    inst = instance_moves.create(
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
            "parent_act": element[0] if element else None,
            "parent_element": element[1] if element else None,
            "schedule": schedule[0] if schedule else None,
            "schedule_fire_at": schedule[1] if schedule else None,
            "chain": automation_chain,
            "start_key": start_key[0] if start_key else None,
            "start_fp": start_key[1] if start_key else None,
        },
    )
    jobs_and_tasks.watch_absent(conn, iid)  # a new instance: its first arm is a plain insert
    rows = step_moves.blocked_all(iid, doc["steps"])
    if on_created is not None:
        on_created(conn, inst)
    if seed_steps is not None:
        rows = seed_steps(conn, inst, rows)
    # the audit left the instance and its steps as they were inserted
    started = driver.make_progress(conn, iid, inst, rows, new=True)
    if started["state"] not in TERMINAL and started["stop_requested_at"] is None:
        # the workflow deadline: the instance's watch, which its first tasks (if any) armed earlier
        jobs_and_tasks.arm_watch(conn, started, doc["deadline_seconds"])
    quotas.check(conn, namespace_id, iid, ver["queues"])
    return started


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
TIME_FILTERS = ("created_after", "created_before", "updated_after", "updated_before", "deadline_before")
_EQUAL_FILTERS = ("state", "paused", "definition_id", "version", "business_key", "schedule_id")

# The list's conditions: the API's filters (each true when not given, its parameter NULL), the prefixes
# and failure filters (``finding``), the credential's queue scope (``:allowed``, NULL: every queue). The
# statements that hold them are planned with their values (``Query.planned_each_time``): a filter not
# given folds away, and each keeps to the index of the filters given (tests/db/test_workflow_find_plans).
_LIST_WHERE = f"""namespace_id = :ns
  AND (CAST(:state AS text) IS NULL OR state = :state)
  AND (CAST(:paused AS boolean) IS NULL OR paused = :paused)
  AND (CAST(:definition_id AS text) IS NULL OR definition_id = :definition_id)
  AND (CAST(:version AS text) IS NULL OR version = :version)
  AND (CAST(:business_key AS text) IS NULL OR business_key = :business_key)
  AND (CAST(:schedule_id AS text) IS NULL OR schedule_id = :schedule_id)
  AND {finding.CONDITIONS}
  AND (CAST(:created_after AS timestamptz) IS NULL OR created_at >= :created_after)
  AND (CAST(:created_before AS timestamptz) IS NULL OR created_at < :created_before)
  AND (CAST(:updated_after AS timestamptz) IS NULL OR updated_at >= :updated_after)
  AND (CAST(:updated_before AS timestamptz) IS NULL OR updated_at < :updated_before)
  AND (CAST(:deadline_before AS timestamptz) IS NULL OR deadline_at < :deadline_before)
  AND (CAST(:allowed AS text[]) IS NULL OR queues <@ CAST(:allowed AS text[]))"""
# the newest ``:limit`` the filters match (the list's first page, a batch action's selection)
_NEWEST = query(
    "instances_newest",
    f"SELECT id FROM workflow_instances WHERE {_LIST_WHERE}\nORDER BY created_at DESC, id DESC LIMIT :limit",
    planned_each_time=True,
)
# a further page: the next ``:limit`` older than the cursor's position
_PAGE_AFTER = query(
    "instances_page_after",
    f"""SELECT id FROM workflow_instances WHERE {_LIST_WHERE}
  AND (created_at, id) < (:c_created, :c_id)
ORDER BY created_at DESC, id DESC LIMIT :limit""",
    planned_each_time=True,
)
# how many the filters match, counted up to ``:cap``
_COUNT = query(
    "instances_count",
    f"SELECT count(*) FROM (SELECT 1 FROM workflow_instances WHERE {_LIST_WHERE} LIMIT :cap) t",
    planned_each_time=True,
)


def _list_params(
    namespace_id: str, filters: dict[str, Any], allowed_queues: tuple[str, ...] | None
) -> dict[str, Any]:
    """The parameters of the list's conditions for ``filters`` (NULL: not given)."""
    params: dict[str, Any] = {"ns": namespace_id, **finding.condition_params(filters)}
    for k in _EQUAL_FILTERS + TIME_FILTERS:
        params[k] = filters.get(k)
    params["allowed"] = None if allowed_queues is None else list(allowed_queues)
    return params


def newest_sql(
    namespace_id: str, filters: dict[str, Any], allowed_queues: tuple[str, ...] | None, limit: int
) -> tuple[Query, dict[str, Any]]:
    """The ids of the newest ``limit`` instances the list's ``filters`` match: the statement and its
    parameters (the list's first page, a batch action's selection; ``tests/db`` EXPLAINs it)."""
    return _NEWEST, {**_list_params(namespace_id, filters, allowed_queues), "limit": limit}


def matching_ids(
    conn: Connection,
    namespace_id: str,
    filters: dict[str, Any],
    allowed_queues: tuple[str, ...] | None,
    limit: int,
) -> list[str]:
    """The ids of the newest ``limit`` instances the list's ``filters`` match (a batch action's selection)."""
    statement, params = newest_sql(namespace_id, filters, allowed_queues, limit)
    return list(run(conn, statement, params).scalars())


def count_instances(
    conn: Connection,
    namespace_id: str,
    filters: dict[str, Any],
    allowed_queues: tuple[str, ...] | None,
    cap: int,
) -> int:
    """How many instances ``list_instances`` would page through, counted up to ``cap + 1``."""
    params = {**_list_params(namespace_id, filters, allowed_queues), "cap": cap + 1}
    return int(run(conn, _COUNT, params).scalar_one())


def list_instances(
    conn: Connection,
    namespace_id: str,
    filters: dict[str, Any],
    limit: int,
    cursor: str | None,
    allowed_queues: tuple[str, ...] | None,
) -> dict:
    params = {**_list_params(namespace_id, filters, allowed_queues), "limit": limit + 1}
    binding = {"ns": namespace_id, "filters": {k: str(v) for k, v in sorted(filters.items())}}
    statement = _NEWEST
    if cursor is not None:
        pos = cursors.decode(cursor, binding, c=cursors.TIME, i=cursors.TEXT)
        params.update(c_created=pos["c"], c_id=pos["i"])
        statement = _PAGE_AFTER
    rows = run(conn, statement, params).all()
    items = [read_instance(conn, r.id) for r in rows[:limit]]
    out: dict[str, Any] = {"items": [instance_view(i) for i in items]}
    if len(rows) > limit:
        last = items[-1]
        out["next_cursor"] = cursors.encode({"c": last["created_at"].isoformat(), "i": last["id"]}, binding)
    return out
