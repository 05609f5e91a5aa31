"""Schedules (X-SCHED): the commands the API and the CLI call and the scheduler tick (the launch is
``schedule_fires``).

- A schedule names a definition and a **pinned version**, a fixed JSON input (optionally with the
  fire time added under ``fire_time_field``), a rule (cron + IANA zone, or a fixed interval;
  ``schedule_times``), an overlap policy and a paused flag.
- ``tick`` (the ``scheduler`` process, every ``LEDGERFLOW_SCHEDULE_TICK_SECONDS``): due schedules are
  locked ``FOR UPDATE SKIP LOCKED``; each gets ONE ``schedule_launch`` job for the latest due fire time
  (missed ones are coalesced and counted) with the idempotency key ``schedule:<id>:<fire time>``, and
  its ``next_fire_at`` moves past now in the same transaction. Two schedulers skip each other's rows;
  a restarted one finds ``next_fire_at`` where the last commit left it.
- ``schedule_fires.launch`` (the ``schedule_launch`` handler, advance pool) records the fire, applies
  the overlap policy and starts the instance.
Every mutation and every fire is written to the operation audit.

A schedule starts workflows later on behalf of its author: ``created_by`` is the credential
that created it, and becomes whoever updates or resumes it (their rights are checked then, as at create).
Each fire checks the author's rights again (``schedule_fires``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from app import audit, jsonx
from app import cursor as cursors
from app.auth import Principal
from app.db_time import db_now
from app.engine.contracts import input_errors
from app.engine.definitions import load_version
from app.engine.row_access import jparse
from app.errors import FieldError, InvalidArgument, NotFound, StateConflict
from app.ids import is_hex32, new_id
from app.integrations import caps
from app.integrations import schedule_times as times
from app.integrations.schedule_times import Rule, RuleError
from app.jsonx import rfc3339
from app.ledger.enqueue import enqueue
from app.ledger.states import JobType
from app.sql import query, run

MAX_SCHEDULES_PER_NAMESPACE = 1000
TICK_BATCH = 100  # schedules handled per tick transaction
_US = timedelta(microseconds=1)
_COLUMNS = (
    "id, namespace_id, name, definition_id, version, input::text AS input, fire_time_field, cron, timezone, "
    "interval_seconds, anchor_at, overlap, paused, next_fire_at, revision, created_by, created_at, updated_at"
)


# --------------------------------------------------------------------------- reads
def _row(row: Any) -> dict[str, Any]:
    d = dict(row._mapping)
    d["input"] = jparse(d["input"])
    return d


def rule_of(s: dict[str, Any]) -> Rule:
    return Rule(
        cron=s["cron"], timezone=s["timezone"], interval_seconds=s["interval_seconds"], anchor=s["anchor_at"]
    )


_SCHEDULE_READ = query(
    "schedule_read", f"SELECT {_COLUMNS} FROM workflow_schedules WHERE id = :id AND namespace_id = :ns"
)
_SCHEDULE_LOCK = query(
    "schedule_lock",
    f"SELECT {_COLUMNS} FROM workflow_schedules WHERE id = :id AND namespace_id = :ns FOR UPDATE",
)


def read_schedule(
    conn: Connection, namespace_id: str, schedule_id: str, *, lock: bool = False
) -> dict[str, Any]:
    if not is_hex32(schedule_id):
        raise NotFound("schedule not found")
    row = run(
        conn, _SCHEDULE_LOCK if lock else _SCHEDULE_READ, {"id": schedule_id, "ns": namespace_id}
    ).first()
    if row is None:
        raise NotFound("schedule not found")
    return _row(row)


def _fire_view(f: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": f.id,
        "fire_at": rfc3339(f.fire_at),
        "kind": f.kind,
        "status": f.status,
        "skipped_missed": f.skipped_count,
        "skipped_missed_capped": f.skipped_capped,
        "created_at": rfc3339(f.created_at),
    }
    if f.reason:
        out["reason"] = f.reason
    if f.instance_id:
        out["instance_id"] = f.instance_id
    return out


_FIRES = (
    "SELECT id, fire_at, kind, status, reason, skipped_count, skipped_capped, instance_id, created_at "
    "FROM workflow_schedule_fires WHERE schedule_id = :s"
)


_SCHEDULE_LAST_FIRE = query(
    "schedule_last_fire",
    _FIRES + " ORDER BY fire_at DESC LIMIT 1",
)


def schedule_view(conn: Connection, s: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The schedule object: the rule, the state, the next five fire times and the last fire."""
    rule = rule_of(s)
    # an active schedule fires next at next_fire_at (coalescing anything already due into one
    # launch at the next tick); a paused one would fire at the times after now once resumed
    start = now if s["paused"] else s["next_fire_at"] - _US
    out: dict[str, Any] = {
        "id": s["id"],
        "name": s["name"],
        "definition_id": s["definition_id"],
        "version": s["version"],
        "input": s["input"],
        "timezone": s["timezone"],
        "overlap": s["overlap"],
        "paused": s["paused"],
        "revision": str(s["revision"]),
        "next_fire_at": rfc3339(s["next_fire_at"]),
        "next_fire_times": [rfc3339(t) for t in times.upcoming(rule, start, 5)],
        "created_at": rfc3339(s["created_at"]),
        "updated_at": rfc3339(s["updated_at"]),
    }
    if s["cron"] is not None:
        out["cron"] = s["cron"]
    else:
        out["interval_seconds"] = s["interval_seconds"]
    if s["fire_time_field"]:
        out["fire_time_field"] = s["fire_time_field"]
    last = run(conn, _SCHEDULE_LAST_FIRE, {"s": s["id"]}).first()
    if last is not None:
        out["last_fire"] = _fire_view(last)
    return out


def get_schedule(conn: Connection, namespace_id: str, schedule_id: str) -> dict[str, Any]:
    return schedule_view(conn, read_schedule(conn, namespace_id, schedule_id), db_now(conn))


# a namespace's schedules, oldest first (ix_workflow_schedules_list), from the start or after a position
_SCHEDULES_PAGE = query(
    "schedules_page",
    f"SELECT {_COLUMNS} FROM workflow_schedules WHERE namespace_id = :ns ORDER BY created_at, id LIMIT :limit",
)
_SCHEDULES_PAGE_AFTER = query(
    "schedules_page_after",
    f"""
SELECT {_COLUMNS} FROM workflow_schedules
WHERE namespace_id = :ns AND (created_at, id) > (:c_created, :c_id)
ORDER BY created_at, id LIMIT :limit
""",
)


def list_schedules(conn: Connection, namespace_id: str, limit: int, cursor: str | None) -> dict[str, Any]:
    binding = {"ns": namespace_id, "list": "schedules"}
    params = {"ns": namespace_id, "limit": limit + 1}
    if cursor is not None:
        pos = cursors.decode(cursor, binding, c=cursors.TIME, i=cursors.TEXT)
        params.update(c_created=pos["c"], c_id=pos["i"])
    rows = run(conn, _SCHEDULES_PAGE if cursor is None else _SCHEDULES_PAGE_AFTER, params).all()
    now = db_now(conn)
    items = [_row(r) for r in rows[:limit]]
    out: dict[str, Any] = {"items": [schedule_view(conn, s, now) for s in items]}
    if len(rows) > limit:
        out["next_cursor"] = cursors.encode(
            {"c": items[-1]["created_at"].isoformat(), "i": items[-1]["id"]}, binding
        )
    return out


_SCHEDULE_FIRES_PAGE = query(
    "schedule_fires_page",
    _FIRES + " ORDER BY fire_at DESC LIMIT :n",
)


def list_fires(conn: Connection, namespace_id: str, schedule_id: str, limit: int) -> dict[str, Any]:
    read_schedule(conn, namespace_id, schedule_id)
    rows = run(conn, _SCHEDULE_FIRES_PAGE, {"s": schedule_id, "n": limit}).all()
    return {"items": [_fire_view(f) for f in rows]}


# --------------------------------------------------------------------------- validation
RULE_FIELDS = ("cron", "timezone", "interval_seconds")


def _rule(spec: dict[str, Any], anchor: datetime) -> Rule:
    """The rule of a create/update body (already shape-checked by the API schema); 400 naming the field."""
    try:
        if spec.get("cron") is not None and spec.get("interval_seconds") is not None:
            raise RuleError("cron", "give either cron or interval_seconds, not both")
        if spec.get("cron") is None and spec.get("interval_seconds") is None:
            raise RuleError("cron", "required: cron (with timezone) or interval_seconds")
        tz = spec.get("timezone") or "UTC"
        times.zone(tz)
        if spec.get("cron") is not None:
            return Rule(cron=times.cron_expression(spec["cron"]), timezone=tz)
        return Rule(interval_seconds=spec["interval_seconds"], timezone=tz, anchor=anchor)
    except RuleError as exc:
        raise InvalidArgument(exc.message, errors=[FieldError(exc.field, exc.message)]) from None


def launch_input(s: dict[str, Any], fire_at: datetime) -> Any:
    if not s.get("fire_time_field"):
        return s["input"]
    return {**s["input"], s["fire_time_field"]: rfc3339(fire_at)}


_SCHEDULE_TARGET_EXISTS = query(
    "schedule_target_exists",
    "SELECT 1 FROM workflow_definitions WHERE id = :d AND namespace_id = :ns",
)


def _check_target(conn: Connection, namespace_id: str, s: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The pinned version exists in the namespace and the input (with a fire time) satisfies it."""
    if (
        not is_hex32(s["definition_id"])
        or not run(conn, _SCHEDULE_TARGET_EXISTS, {"d": s["definition_id"], "ns": namespace_id}).first()
    ):
        raise InvalidArgument(
            "unknown definition", errors=[FieldError("definition_id", "unknown definition")]
        )
    if str(s["version"]).lower() == "latest":
        raise InvalidArgument(
            "a pinned version is required", errors=[FieldError("version", "a pinned version")]
        )
    try:
        ver = load_version(conn, namespace_id, s["definition_id"], s["version"])
    except NotFound:
        raise InvalidArgument(
            "unknown version of the definition", errors=[FieldError("version", "unknown version")]
        ) from None
    if s.get("fire_time_field") and not isinstance(s["input"], dict):
        raise InvalidArgument(
            "fire_time_field needs an object input",
            errors=[FieldError("fire_time_field", "the input must be a JSON object to carry the fire time")],
        )
    errors = input_errors(ver["document"]["input_schema"], launch_input(s, now))
    if errors:
        raise InvalidArgument("input does not satisfy the pinned version's input contract", errors=errors)
    return ver


# --------------------------------------------------------------------------- commands
def _audit(
    conn: Connection,
    principal: Principal,
    request_id: str | None,
    action: str,
    sid: str,
    *,
    before: Any = None,
    after: Any = None,
    reason: str | None = None,
) -> None:
    audit.record(
        conn,
        principal=principal,
        request_id=request_id,
        action=action,
        target_type="schedule",
        target_id=sid,
        operation_id=new_id(),
        before=before,
        after=after,
        reason=reason,
    )


_SCHEDULE_INSERT = query(
    "schedule_insert",
    "INSERT INTO workflow_schedules (id, namespace_id, name, definition_id, version, input, fire_time_field, "
    "cron, timezone, interval_seconds, anchor_at, overlap, paused, next_fire_at, created_by) VALUES "
    "(:id, :ns, :name, :d, :v, CAST(:input AS jsonb), :ftf, :cron, :tz, :iv, :anchor, :overlap, :paused, "
    ":next, :by) ON CONFLICT (namespace_id, name) DO NOTHING RETURNING id",
)


def create_schedule(
    conn: Connection,
    principal: Principal,
    body: dict[str, Any],
    *,
    request_id: str | None = None,
    check_queues: Callable[[list[str]], None] | None = None,
) -> dict[str, Any]:
    ns = principal.namespace_id
    now = db_now(conn)
    rule = _rule(body, now)
    spec = {**body, "input": body["input"], "fire_time_field": body.get("fire_time_field")}
    ver = _check_target(conn, ns, spec, now)
    if check_queues is not None:
        check_queues(ver["queues"])
    caps.reserve(
        conn,
        "workflow_schedules",
        ns,
        MAX_SCHEDULES_PER_NAMESPACE,
        "SCHEDULE_LIMIT",
        f"the namespace has {MAX_SCHEDULES_PER_NAMESPACE} schedules (the limit)",
    )
    sid = new_id()
    inserted = run(
        conn,
        _SCHEDULE_INSERT,
        {
            "id": sid,
            "ns": ns,
            "name": body["name"],
            "d": ver["definition_id"],
            "v": ver["version"],
            "input": jsonx.dumps(body["input"]),
            "ftf": body.get("fire_time_field"),
            "cron": rule.cron,
            "tz": rule.timezone,
            "iv": rule.interval_seconds,
            "anchor": now,
            "overlap": body.get("overlap", "skip"),
            "paused": bool(body.get("paused", False)),
            "next": times.next_after(rule, now),
            "by": principal.actor_id,
        },
    ).first()
    if inserted is None:
        raise StateConflict(f"a schedule named {body['name']!r} already exists")
    view = get_schedule(conn, ns, sid)
    _audit(conn, principal, request_id, "schedule.create", sid, after=view)
    return view


UPDATABLE = (
    "definition_id",
    "version",
    "input",
    "fire_time_field",
    "cron",
    "timezone",
    "interval_seconds",
    "overlap",
)


_SCHEDULE_UPDATE = query(
    "schedule_update",
    "UPDATE workflow_schedules SET definition_id = :d, version = :v, input = CAST(:input AS jsonb), "
    "fire_time_field = :ftf, cron = :cron, timezone = :tz, interval_seconds = :iv, anchor_at = :anchor, "
    "overlap = :overlap, next_fire_at = :next, created_by = :by, revision = revision + 1, updated_at = now() "
    "WHERE id = :id",
)


def update_schedule(
    conn: Connection,
    principal: Principal,
    schedule_id: str,
    changes: dict[str, Any],
    *,
    request_id: str | None = None,
    check_queues: Callable[[list[str]], None] | None = None,
) -> dict[str, Any]:
    """Change any of ``UPDATABLE``; a new rule starts counting from now (missed fire times of the old
    rule are dropped, not launched)."""
    ns = principal.namespace_id
    s = read_schedule(conn, ns, schedule_id, lock=True)
    now = db_now(conn)
    before = schedule_view(conn, s, now)
    merged = {**s, **changes}
    if "cron" in changes and changes["cron"] is not None:
        merged["interval_seconds"] = None
    if "interval_seconds" in changes and changes["interval_seconds"] is not None:
        merged["cron"] = None
    rule_changed = any(k in changes for k in RULE_FIELDS)
    rule = _rule(merged, now) if rule_changed else rule_of(s)
    ver = _check_target(conn, ns, merged, now)
    if check_queues is not None:
        check_queues(ver["queues"])
    run(
        conn,
        _SCHEDULE_UPDATE,
        {
            "id": schedule_id,
            "d": ver["definition_id"],
            "v": ver["version"],
            "input": jsonx.dumps(merged["input"]),
            "ftf": merged.get("fire_time_field"),
            "cron": rule.cron,
            "tz": rule.timezone,
            "iv": rule.interval_seconds,
            "anchor": now if rule_changed else s["anchor_at"],
            "overlap": merged["overlap"],
            "next": times.next_after(rule, now) if rule_changed else s["next_fire_at"],
            "by": principal.actor_id,
        },
    )
    view = get_schedule(conn, ns, schedule_id)
    _audit(conn, principal, request_id, "schedule.update", schedule_id, before=before, after=view)
    return view


_SCHEDULE_SET_PAUSED = query(
    "schedule_set_paused",
    "UPDATE workflow_schedules SET paused = :p, revision = revision + 1, updated_at = now(), "
    "created_by = CASE WHEN :p THEN created_by ELSE CAST(:by AS text) END WHERE id = :id AND paused = :was",
)


def set_paused(
    conn: Connection,
    principal: Principal,
    schedule_id: str,
    paused: bool,
    *,
    request_id: str | None = None,
    reason: str | None = None,
    check_queues: Callable[[list[str]], None] | None = None,
) -> dict[str, Any]:
    """Pause or resume. Resuming hands the fire times missed while paused, coalesced, to ONE launch at
    once (the latest of them, as a tick would); the response says which and how many (``missed``). The
    resuming credential becomes the schedule's author (``check_queues``: its rights on the version's
    queues)."""
    ns = principal.namespace_id
    s = read_schedule(conn, ns, schedule_id, lock=True)
    now = db_now(conn)
    missed = None
    if s["paused"] != paused:
        if not paused and check_queues is not None:
            check_queues(load_version(conn, ns, s["definition_id"], s["version"])["queues"])
        run(
            conn,
            _SCHEDULE_SET_PAUSED,
            {"id": schedule_id, "p": paused, "was": s["paused"], "by": principal.actor_id},
        )
        if not paused:
            d = times.due(rule_of(s), s["next_fire_at"], now)
            if d is not None:
                # launched by the resume itself: a later tick would fold the next fire time in too and
                # launch that one instead of the fire time named here
                _hand_out(conn, s, d)
                missed = {
                    "fire_times": d.skipped + 1,
                    "capped": d.capped,
                    "coalesced_into": rfc3339(d.fire_at),
                    "skipped": d.skipped,
                }
    view = get_schedule(conn, ns, schedule_id)
    action = "schedule.pause" if paused else "schedule.resume"
    _audit(
        conn,
        principal,
        request_id,
        action,
        schedule_id,
        before={"paused": s["paused"]},
        after={"paused": paused, "missed": missed},
        reason=reason,
    )
    return {"schedule": view, "missed": missed}


_SCHEDULE_DELETE = query(
    "schedule_delete",
    "DELETE FROM workflow_schedules WHERE id = :id",
)


def delete_schedule(
    conn: Connection, principal: Principal, schedule_id: str, *, request_id: str | None = None
) -> dict[str, Any]:
    """Delete the rule and its fire history; launched instances keep their ``schedule_id``; a
    ``schedule_launch`` job still queued finds no schedule and is skipped."""
    s = read_schedule(conn, principal.namespace_id, schedule_id, lock=True)
    before = schedule_view(conn, s, db_now(conn))
    run(conn, _SCHEDULE_DELETE, {"id": schedule_id})
    _audit(conn, principal, request_id, "schedule.delete", schedule_id, before=before)
    return {"id": schedule_id, "deleted": True}


def launch_now(
    conn: Connection,
    principal: Principal,
    schedule_id: str,
    *,
    request_id: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """Launch now: a MANUAL fire at the database's now, through a ``schedule_launch`` job (the
    overlap policy and a pause do not apply to it; quotas do)."""
    s = read_schedule(conn, principal.namespace_id, schedule_id, lock=True)
    fire_at = db_now(conn)
    job = _enqueue_launch(conn, s, fire_at, "MANUAL", 0, False)
    _audit(
        conn,
        principal,
        request_id,
        "schedule.launch_now",
        schedule_id,
        after={"fire_at": rfc3339(fire_at), "job_id": job.id},
        reason=reason,
    )
    return {"schedule_id": schedule_id, "fire_at": rfc3339(fire_at), "job_id": str(job.id)}


def _enqueue_launch(
    conn: Connection, s: dict[str, Any], fire_at: datetime, kind: str, skipped: int, capped: bool
) -> Any:
    key = f"schedule:{s['id']}:{'manual:' if kind == 'MANUAL' else ''}{rfc3339(fire_at)}"
    payload = {
        "schedule_id": s["id"],
        "namespace_id": s["namespace_id"],
        "fire_at": rfc3339(fire_at),
        "kind": kind,
        "skipped": skipped,
        "skipped_capped": capped,
    }
    return enqueue(conn, JobType.SCHEDULE_LAUNCH, payload, idempotency_key=key, operation_key=key)


_SCHEDULES_DUE = query(
    "schedules_due",
    f"SELECT {_COLUMNS} FROM workflow_schedules WHERE NOT paused AND next_fire_at <= now() "
    "ORDER BY next_fire_at LIMIT :n FOR UPDATE SKIP LOCKED",
)


# --------------------------------------------------------------------------- the scheduler tick
def tick(conn: Connection, *, batch: int = TICK_BATCH) -> list[dict[str, Any]]:
    """Hand every due active schedule (at most ``batch``, oldest due first) ONE ``schedule_launch``
    job for its latest due fire time and move ``next_fire_at`` past now, in the caller's transaction.
    Rows another scheduler holds are skipped (``SKIP LOCKED``); the job's idempotency key
    (schedule, fire time) and the unique fire row make a double hand-out harmless anyway."""
    rows = run(conn, _SCHEDULES_DUE, {"n": batch}).all()
    if not rows:
        return []
    now = db_now(conn)
    out = []
    for row in rows:
        s = _row(row)
        d = times.due(rule_of(s), s["next_fire_at"], now)
        if d is None:  # pragma: no cover - selected as due by the same clock
            continue
        job = _hand_out(conn, s, d)
        out.append({"schedule_id": s["id"], "fire_at": d.fire_at, "skipped": d.skipped, "job_id": job.id})
    return out


_SCHEDULES_DUE_IN_NAMESPACE = query(
    "schedules_due_in_namespace",
    f"SELECT {_COLUMNS} FROM workflow_schedules WHERE namespace_id = :ns AND NOT paused "
    "AND next_fire_at <= now() + make_interval(secs => :s) "
    "ORDER BY next_fire_at LIMIT :n FOR UPDATE SKIP LOCKED",
)


def hand_out_due_by(conn: Connection, namespace_id: str, seconds: float, *, batch: int = TICK_BATCH) -> int:
    """Time skipping (``app.integrations.time_skip``, test servers only): every active schedule of the
    namespace whose next fire time falls within ``seconds`` from now gets its launch now, as the tick
    would have handed it out at that time (its latest fire time in the span, earlier ones coalesced),
    and ``next_fire_at`` moves past the span. At most ``batch`` schedules; returns how many."""
    rows = run(conn, _SCHEDULES_DUE_IN_NAMESPACE, {"ns": namespace_id, "s": seconds, "n": batch}).all()
    until = db_now(conn) + timedelta(seconds=seconds)
    handed = 0
    for row in rows:
        s = _row(row)
        d = times.due(rule_of(s), s["next_fire_at"], until)
        if d is not None:
            _hand_out(conn, s, d)
            handed += 1
    return handed


_SCHEDULE_HAND_OUT = query(
    "schedule_hand_out",
    "UPDATE workflow_schedules SET next_fire_at = :next WHERE id = :id AND next_fire_at = :was",
)


def _hand_out(conn: Connection, s: dict[str, Any], d: Any) -> Any:
    """The due fire ``d`` of schedule ``s`` (locked by the caller): its ``schedule_launch`` job, and
    ``next_fire_at`` moved past it."""
    job = _enqueue_launch(conn, s, d.fire_at, "SCHEDULED", d.skipped, d.capped)
    run(conn, _SCHEDULE_HAND_OUT, {"id": s["id"], "next": d.following, "was": s["next_fire_at"]})
    return job
