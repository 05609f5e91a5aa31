"""Pinned-version start (W-START) and instance reads (W-START-4, GET /v1/workflows)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app import cursor as cursors
from app import jsonx
from app.engine import advance, finding, quotas, work
from app.engine.contracts import input_errors
from app.engine.definitions import load_version
from app.engine.documents import VERSION_RE
from app.engine.states import TERMINAL
from app.engine.store import MISSING, read_instance
from app.engine.transitions import instance_moves, step_moves
from app.errors import FieldError, InvalidArgument
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
    inserted as the start settles it and written at most once more (``advance.settle_progress``)."""
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
    work.watch_absent(conn, iid)  # a new instance: its first arm is a plain insert
    rows = step_moves.blocked_all(iid, doc["steps"])
    if on_created is not None:
        on_created(conn, inst)
    if seed_steps is not None:
        rows = seed_steps(conn, inst, rows)
    # the audit left the instance and its steps as they were inserted
    started = advance.settle_progress(conn, iid, inst, rows, new=True)
    if started["state"] not in TERMINAL and started["stop_requested_at"] is None:
        # the workflow deadline: the instance's watch, which its first tasks (if any) armed earlier
        work.arm_watch(conn, started, doc["deadline_seconds"])
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
    where += finding.conditions(filters, params)  # prefixes, failure filters (issue 47)
    for k, cond in TIME_FILTERS.items():
        if k in filters:
            where.append(cond)
            params[k] = filters[k]
    if allowed_queues is not None:
        where.append("queues <@ CAST(:allowed AS text[])")
        params["allowed"] = list(allowed_queues)
    return where, params


def newest_sql(
    namespace_id: str, filters: dict[str, Any], allowed_queues: tuple[str, ...] | None, limit: int
) -> tuple[str, dict[str, Any]]:
    """The ids of the newest ``limit`` instances the list's ``filters`` match: the statement and its
    parameters (the list's first page, a batch action's selection; ``tests/db`` EXPLAINs it)."""
    where, params = _list_where(namespace_id, filters, allowed_queues)
    params["limit"] = limit
    sql = f"SELECT id FROM workflow_instances WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT :limit"
    return sql, params


def matching_ids(
    conn: Connection,
    namespace_id: str,
    filters: dict[str, Any],
    allowed_queues: tuple[str, ...] | None,
    limit: int,
) -> list[str]:
    """The ids of the newest ``limit`` instances the list's ``filters`` match (a batch action's selection)."""
    sql, params = newest_sql(namespace_id, filters, allowed_queues, limit)
    return list(run(conn, sql, params).scalars())


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
        pos = cursors.decode(cursor, binding, c=cursors.TIME, i=cursors.TEXT)
        created, last_id = pos["c"], pos["i"]
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
