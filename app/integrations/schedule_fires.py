"""The ``schedule_launch`` job's work (X-SCHED): one row in ``workflow_schedule_fires`` per (schedule,
fire time) — unique, so a fire time starts at most one instance whatever happens — then the overlap
policy, then ``start_workflow`` in a savepoint: a quota (429) or limit refusal is recorded as a SKIPPED
fire with its reason, never retried. The schedules themselves, their commands and the tick that hands
out fire times are ``schedules``.

A schedule starts workflows with the rights of its author (``created_by``, the credential that
created, last updated or last resumed it), checked at every fire: a revoked or expired author, or one
without ``workflows:start`` (and ``tasks:submit`` and the queues of a version with task queues), gives a
SKIPPED fire saying why, and the schedule pauses itself (audited) until a credential that may resumes it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app import audit, auth
from app.auth import Principal, Scope
from app.engine import audit_entries, instances, stopping
from app.engine.row_access import lock_instance
from app.engine.states import TERMINAL
from app.errors import LedgerflowError, NotFound, PermissionDenied, StateConflict
from app.ids import new_id
from app.integrations import schedule_times as times
from app.integrations.schedule_models import FIRE_KINDS
from app.integrations.schedules import launch_input, read_schedule
from app.jsonx import rfc3339
from app.ledger.outcome import PermanentError, payload_id
from app.sql import query, run

MAX_CANCEL_PREVIOUS = 20  # earlier instances a cancel_previous launch cancels, at most
FIRES_KEPT = 1000  # fire rows kept per schedule (older ones are pruned by the launch, 100 at a time)


_FIRE_RECORD = query(
    "schedule_fire_record",
    "UPDATE workflow_schedule_fires SET status = :st, reason = :r, instance_id = :i WHERE id = :id",
)
_FIRES_PRUNE = query(
    "schedule_fires_prune",
    "DELETE FROM workflow_schedule_fires WHERE id IN (SELECT id FROM workflow_schedule_fires "
    "WHERE schedule_id = :s ORDER BY fire_at DESC OFFSET :keep LIMIT 100)",
)
_FIRE_INSERT = query(
    "schedule_fire_insert",
    "INSERT INTO workflow_schedule_fires (id, schedule_id, namespace_id, fire_at, kind, status, "
    "skipped_count, skipped_capped, job_id) VALUES (:id, :s, :ns, :at, :kind, 'SKIPPED', :sk, :cap, :job) "
    "ON CONFLICT (schedule_id, fire_at) DO NOTHING RETURNING id",
)
_OPEN_INSTANCES = query(
    "schedule_open_instances",
    "SELECT id FROM workflow_instances WHERE schedule_id = :s AND state <> ALL(:t) "
    "ORDER BY created_at LIMIT :n",
)


def _fire_of(payload: dict[str, Any]) -> tuple[datetime, str, int]:
    """The fire a ``schedule_launch`` payload describes: (fire time, kind, skipped count). A field of the
    wrong shape (a job enqueued by hand) is a PermanentError naming it: dead at once, nothing written."""
    try:
        fire_at = datetime.fromisoformat(str(payload["fire_at"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        raise PermanentError(
            f"the job's payload field 'fire_at' is not an RFC 3339 time: {str(payload.get('fire_at'))[:64]!r}"
        ) from None
    if fire_at.tzinfo is None:
        raise PermanentError(
            f"the job's payload field 'fire_at' has no UTC offset: {str(payload['fire_at'])[:64]!r}"
        )
    kind = payload.get("kind", "SCHEDULED")
    if kind not in FIRE_KINDS:
        raise PermanentError(f"the job's payload field 'kind' is not one of {', '.join(FIRE_KINDS)}")
    skipped = payload.get("skipped", 0)
    if isinstance(skipped, bool) or not isinstance(skipped, int) or skipped < 0:
        raise PermanentError(f"the job's payload field 'skipped' is not a count: {str(skipped)[:64]!r}")
    return fire_at, kind, skipped


def launch(conn: Connection, payload: dict[str, Any], job_id: int) -> dict[str, Any]:
    """The ``schedule_launch`` job's one write (run once through an effect receipt): record the fire,
    apply the overlap policy, start the instance; a refusal of the start is a SKIPPED fire."""
    sid, ns = payload_id(payload, "schedule_id"), payload_id(payload, "namespace_id")
    fire_at, kind, skipped = _fire_of(payload)
    try:
        s = read_schedule(conn, ns, sid, lock=True)
    except NotFound:
        return {"skipped": "the schedule was deleted"}
    fire_id = run(
        conn,
        _FIRE_INSERT,
        {
            "id": new_id(),
            "s": sid,
            "ns": ns,
            "at": fire_at,
            "kind": kind,
            "sk": skipped,
            "cap": bool(payload.get("skipped_capped")),
            "job": job_id,
        },
    ).scalar()
    if fire_id is None:
        return {"skipped": f"fire time {rfc3339(fire_at)} was already handled"}
    unfinished = [
        r.id
        for r in run(
            conn,
            _OPEN_INSTANCES,
            {"s": sid, "t": sorted(TERMINAL), "n": MAX_CANCEL_PREVIOUS},
        )
    ]
    verdict = times.fire_decision(kind, s["paused"], s["overlap"], len(unfinished))
    instance_id, reason = None, None
    if verdict in (times.SKIP_PAUSED, times.SKIP_OVERLAP):
        reason = (
            "the schedule is paused"
            if verdict == times.SKIP_PAUSED
            else f"overlap policy skip: {len(unfinished)} earlier instance(s) unfinished ({unfinished[0]})"
        )
        reason = f"{verdict}: {reason}"
    else:
        author = auth.acting_principal(conn, s["created_by"])
        try:
            _may_start(author, [])
            if verdict == times.CANCEL_THEN_LAUNCH:
                _cancel_previous(conn, unfinished, sid)
            instance_id, reason = _start(conn, s, fire_at, author)
        except PermissionDenied as exc:  # the author's rights: the schedule stops until resumed
            instance_id, reason = None, f"{exc.code}: {exc.message}"
            _pause(conn, s, reason)
    status = "LAUNCHED" if instance_id else "SKIPPED"
    run(
        conn,
        _FIRE_RECORD,
        {"id": fire_id, "st": status, "r": reason, "i": instance_id},
    )
    # bounded history: the tick never hands out a fire time at or before next_fire_at again, so pruned
    # rows are not needed for "exactly once"
    run(
        conn,
        _FIRES_PRUNE,
        {"s": sid, "keep": FIRES_KEPT},
    )
    result = {
        "fire_at": rfc3339(fire_at),
        "kind": kind,
        "status": status,
        "skipped_missed": skipped,
        "instance_id": instance_id,
        "reason": reason,
    }
    audit.record(
        conn,
        principal=audit_entries.system_principal(ns),
        request_id=None,
        action="schedule.fire",
        target_type="schedule",
        target_id=sid,
        workflow_id=instance_id,
        operation_id=new_id(),
        after=result,
        reason=reason,
    )
    return result


def _cancel_previous(conn: Connection, instance_ids: list[str], schedule_id: str) -> None:
    for iid in instance_ids:
        inst = lock_instance(conn, iid)
        if inst["state"] in TERMINAL or inst["cancel_requested_at"] is not None:
            continue
        try:
            with conn.begin_nested():
                stopping.request_cancel(conn, inst, reason="canceled by the schedule's overlap policy")
                audit_entries.advance(
                    conn,
                    inst,
                    "workflow.control.cancel",
                    after={"cause": "schedule overlap policy cancel_previous", "schedule_id": schedule_id},
                )
        except StateConflict:
            continue  # e.g. NEEDS_REVIEW: a person decides; the launch goes ahead


def _may_start(author: Principal | None, queues: list[str]) -> None:
    why = auth.authority_problem(author, [Scope.WORKFLOWS_START], queues, who="the schedule's author")
    if why is not None:
        raise PermissionDenied(why)


_Q_SCHEDULE_FIRE_PAUSE = query(
    "schedule_fire_pause",
    "UPDATE workflow_schedules SET paused = true, revision = revision + 1, updated_at = now() "
    "WHERE id = :id AND NOT paused",
)


def _pause(conn: Connection, s: dict[str, Any], reason: str) -> None:
    """The schedule may not act for its author: it pauses itself, audited with the reason."""
    run(
        conn,
        _Q_SCHEDULE_FIRE_PAUSE,
        {"id": s["id"]},
    )
    audit.record(
        conn,
        principal=audit_entries.system_principal(s["namespace_id"]),
        request_id=None,
        action="schedule.pause",
        target_type="schedule",
        target_id=s["id"],
        operation_id=new_id(),
        before={"paused": s["paused"]},
        after={"paused": True},
        reason=reason[:1000],
    )


def _start(
    conn: Connection, s: dict[str, Any], fire_at: datetime, author: Principal | None
) -> tuple[str | None, str | None]:
    """Start the instance in a savepoint, as ``author`` may (the version's task queues need
    ``tasks:submit`` and the queue scope); a refusal (quota 429, limit, a version or input that no
    longer fits, the author's rights) rolls the savepoint back and becomes the skip reason."""

    body = {
        "definition_id": s["definition_id"],
        "version": s["version"],
        "input": launch_input(s, fire_at),
        "business_key": "",
    }

    def audit_start(c: Connection, created: dict) -> None:
        principal = audit_entries.system_principal(s["namespace_id"])
        audit_entries.started(c, principal, created["id"], instances.instance_view(created), request_id=None)

    try:
        with conn.begin_nested():
            inst = instances.start_workflow(
                conn,
                s["namespace_id"],
                body,
                on_created=audit_start,
                check_queues=lambda qs: _may_start(author, qs),
                schedule=(s["id"], fire_at),
            )
    except PermissionDenied:
        raise
    except LedgerflowError as exc:
        return None, f"{exc.code}: {exc.message}"
    return inst["id"], None
