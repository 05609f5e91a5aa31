"""History reads (X-HIST, W-STEP-6): every activation of a step, every task attempt / poll round, and
the operation audit of a workflow. Newest first, opaque cursors bound to namespace + workflow (+ step)
+ query kind, so a cursor of another workflow or query is a 400."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app import audit
from app import cursor as cursors
from app.engine import traces
from app.engine.documents import KEY_RE
from app.engine.row_access import MISSING, jparse, read_step
from app.engine.task_protocol import task_view
from app.engine.transitions.task_moves import TASK_COLS
from app.errors import FieldError, InvalidArgument, NotFound
from app.ids import is_hex32
from app.jsonx import rfc3339
from app.sql import query, run


def _step_id(conn: Connection, inst: dict, key: str) -> str:
    """The id of declared step ``key`` (a BLOCKED step has no row yet, and no history: its id names none)."""
    step = read_step(conn, inst["id"], key) if KEY_RE.fullmatch(key) else None
    if step is None:
        raise NotFound("step not found")
    return str(step["id"])


_HISTORY_ACTIVATIONS = query(
    "history_activations",
    """
SELECT a.id, a.sequence, a.state, a.input::text AS input, a.output::text AS output, a.error::text AS error,
       a.task_attempts, a.child_instance_id, a.activated_at, a.completed_at,
       w.id AS wait_id, w.kind AS wait_kind, w.state AS wait_state, w.deadline_at AS wait_deadline_at,
       w.winner_signal_id, w.resolved_at AS wait_resolved_at, w.correlation_key
FROM workflow_all_activations a LEFT JOIN workflow_waits w ON w.activation_id = a.id
WHERE a.step_id = :s AND (CAST(:before AS integer) IS NULL OR a.sequence < :before)
ORDER BY a.sequence DESC LIMIT :lim
""",
)


def activations(conn: Connection, inst: dict, key: str, limit: int, cursor: str | None) -> dict:
    step_id = _step_id(conn, inst, key)
    binding = {"ns": inst["namespace_id"], "wf": inst["id"], "step": key, "k": "step_activations"}
    before = cursors.decode(cursor, binding, s=cursors.INT)["s"] if cursor else None
    rows = run(
        conn,
        _HISTORY_ACTIVATIONS,
        {"s": step_id, "before": before, "lim": limit + 1},
    ).all()
    items = []
    for r in rows[:limit]:
        item: dict[str, Any] = {
            "id": r.id,
            "sequence": r.sequence,
            "state": r.state,
            "task_attempts": r.task_attempts,
            "activated_at": rfc3339(r.activated_at),
        }
        for k in ("input", "output", "error"):
            v = jparse(getattr(r, k))
            if v is not MISSING:
                item[k] = v
        if r.completed_at is not None:
            item["completed_at"] = rfc3339(r.completed_at)
        if r.child_instance_id:
            item["child_workflow_id"] = r.child_instance_id
        if r.wait_id:
            wait: dict[str, Any] = {"id": r.wait_id, "kind": r.wait_kind, "state": r.wait_state}
            if r.correlation_key is not None:
                wait["correlation_key"] = r.correlation_key
            if r.wait_deadline_at is not None:
                wait["deadline_at"] = rfc3339(r.wait_deadline_at)
            if r.winner_signal_id:
                wait["winner_signal_id"] = r.winner_signal_id
            if r.wait_resolved_at is not None:
                wait["resolved_at"] = rfc3339(r.wait_resolved_at)
            item["wait"] = wait
        items.append(item)
    out: dict[str, Any] = {"items": items}
    if len(rows) > limit:
        out["next_cursor"] = cursors.encode({"s": items[-1]["sequence"]}, binding)
    return out


_TASK_COLS = f"""{TASK_COLS}, a.sequence AS activation_sequence, {traces.COLUMNS}"""


_HISTORY_ROUNDS = query(
    "history_rounds",
    f"""
SELECT {_TASK_COLS} FROM workflow_tasks t JOIN workflow_all_activations a ON a.id = t.activation_id
WHERE t.instance_id = :i AND t.step_key = :k AND t.purpose = 'STEP'
  AND (CAST(:at AS timestamptz) IS NULL OR (t.created_at, t.id) < (CAST(:at AS timestamptz), :aid))
ORDER BY t.created_at DESC, t.id DESC LIMIT :lim
""",
)


def rounds(conn: Connection, inst: dict, key: str, limit: int, cursor: str | None) -> dict:
    """Every task attempt of the step over all its activations (POLL: with its round number)."""
    _step_id(conn, inst, key)  # a step without a row (BLOCKED) has no rounds: not found
    binding = {"ns": inst["namespace_id"], "wf": inst["id"], "step": key, "k": "step_rounds"}
    at = aid = None
    if cursor:
        pos = cursors.decode(cursor, binding, t=cursors.TIME, i=cursors.TEXT)
        at, aid = pos["t"], pos["i"]
    rows = run(
        conn,
        _HISTORY_ROUNDS,
        {"i": inst["id"], "k": key, "at": at, "aid": aid, "lim": limit + 1},
    ).all()
    items = []
    for r in rows[:limit]:
        d = dict(r._mapping)
        for k in ("input", "output", "error"):
            d[k] = jparse(d[k])
        view = task_view(d)
        view["activation_id"] = d["activation_id"]
        view["activation_sequence"] = d["activation_sequence"]
        view.update(traces.attempt_fields(d))  # who ran it, how it failed (issue 47)
        items.append((d, view))
    out: dict[str, Any] = {"items": [v for _, v in items]}
    if len(rows) > limit:
        last = items[-1][0]
        out["next_cursor"] = cursors.encode({"t": rfc3339(last["created_at"]), "i": last["id"]}, binding)
    return out


# --------------------------------------------------------------------------- operation audit (W-AUDIT)
def _op_item(row: dict) -> dict[str, Any]:
    return {
        "id": row["id"],
        "workflow_id": row["workflow_id"],
        "operation_id": row["operation_id"] or row["id"],
        "actor_id": row["actor_id"],
        "action": row["action"],
        "created_at": rfc3339(row["created_at"]),
    }


def operations(conn: Connection, inst: dict, limit: int, cursor: str | None) -> dict:
    """The workflow resource's audit (start, advances, control, recovery); signal rows have their own
    route (``signal_operations``)."""
    page = audit.list_entries(
        conn,
        inst["namespace_id"],
        workflow_id=inst["id"],
        limit=limit,
        cursor=cursor,
        kind="workflow_operations",
        exclude_target_type="signal",
    )
    out: dict[str, Any] = {"items": [_op_item(r) for r in page.items]}
    if page.next_cursor:
        out["next_cursor"] = page.next_cursor
    return out


def operation(conn: Connection, inst: dict, audit_id: str, *, signal: bool = False) -> dict:
    row = audit.get(conn, inst["namespace_id"], audit_id) if is_hex32(audit_id) else None
    if row is None or row["workflow_id"] != inst["id"] or (row["target_type"] == "signal") != signal:
        raise NotFound("operation not found")
    out = _op_item(row)
    if signal:
        out["signal_id"] = row["target_id"]
    if row["reason"] is not None:
        out["reason"] = row["reason"]
    if row["evidence_ref"]:
        out["evidence_ref"] = row["evidence_ref"]
    out["before"] = row["before"]
    out["after"] = row["after"]
    return out


# --------------------------------------------------------------------------- signal-resource audit (X-HIST)
def signal_operations(
    conn: Connection, inst: dict, signal_id: str | None, limit: int, cursor: str | None
) -> dict:
    """Audit of the signal resources of a workflow (acceptance by the sender with reason and
    evidence_ref; consumption, rejection, expiry by the engine), newest first; ``signal_id`` narrows
    it to one signal. The cursor is bound to namespace + workflow + this query kind (+ the filter)."""
    if signal_id is not None and not is_hex32(signal_id):
        raise InvalidArgument(errors=[FieldError("signal_id", "a 32-character lowercase hex signal id")])
    page = audit.list_entries(
        conn,
        inst["namespace_id"],
        workflow_id=inst["id"],
        target_type="signal",
        target_id=signal_id,
        limit=limit,
        cursor=cursor,
        kind="workflow_signal_operations",
    )
    out: dict[str, Any] = {"items": [{**_op_item(r), "signal_id": r["target_id"]} for r in page.items]}
    if page.next_cursor:
        out["next_cursor"] = page.next_cursor
    return out


_HISTORY_EVENTS_PAGE = query(
    "history_events_page",
    "SELECT id, seq, type, body::text AS body, created_at FROM workflow_events "
    "WHERE instance_id = :i AND seq > :after ORDER BY seq LIMIT :n",
)


# --------------------------------------------------------------------------- events (X-EVENT)
def events(conn: Connection, inst: dict, limit: int, cursor: str | None) -> dict:
    """The instance's events in sequence order (oldest first, ``app.engine.events``); the cursor is
    bound to namespace + workflow + this query kind."""
    binding = {"ns": inst["namespace_id"], "wf": inst["id"], "k": "workflow_events"}
    after = cursors.decode(cursor, binding, s=cursors.INT)["s"] if cursor else 0
    rows = run(
        conn,
        _HISTORY_EVENTS_PAGE,
        {"i": inst["id"], "after": after, "n": limit + 1},
    ).all()
    items = [
        {
            "id": r.id,
            "seq": r.seq,
            "type": r.type,
            "workflow_id": inst["id"],
            "created_at": rfc3339(r.created_at),
            "body": jparse(r.body),
        }
        for r in rows[:limit]
    ]
    out: dict[str, Any] = {"items": items}
    if len(rows) > limit:
        out["next_cursor"] = cursors.encode({"s": items[-1]["seq"]}, binding)
    return out


_HISTORY_EVENT_TIME = query(
    "history_event_time",
    "SELECT created_at FROM workflow_events WHERE instance_id = :i AND seq = :s",
)


def event_time(conn: Connection, inst: dict, seq: int) -> str | None:
    """When the instance's event ``seq`` was written (RFC 3339), None when there is none: the time a page
    of events measures its first row from."""
    row = run(
        conn,
        _HISTORY_EVENT_TIME,
        {"i": inst["id"], "s": seq},
    ).one_or_none()
    return None if row is None else rfc3339(row.created_at)


# Event types whose row names an error: the task's (task.*) or the step activation's (step.*).
_TASK_ERROR_EVENTS = ("task.failed", "task.timed_out")
_STEP_ERROR_EVENTS = ("step.failed", "step.needs_review")


_TASK_ERRORS = query(
    "history_task_errors",
    "SELECT id, error::text AS error FROM workflow_tasks WHERE instance_id = :i AND id = ANY(:ids)",
)
_ACTIVATION_ERRORS = query(
    "history_activation_errors",
    "SELECT id, error::text AS error FROM workflow_all_activations WHERE instance_id = :i AND id = ANY(:ids)",
)


def event_errors(conn: Connection, inst: dict, items: list[dict]) -> dict[str, Any]:
    """``{event id: error}`` for a page of ``events`` (a failed / timed-out task: the task's error; a
    failed step or one in review: its activation's error). Events keep no error of their own (bounded
    bodies); two statements for a page, by the primary keys the events name, within this instance."""
    task_ids = sorted({str(e["body"].get("task_id")) for e in items if e["type"] in _TASK_ERROR_EVENTS})
    act_ids = sorted({str(e["body"].get("activation_id")) for e in items if e["type"] in _STEP_ERROR_EVENTS})
    found: dict[str, Any] = {}
    for sql, ids in ((_TASK_ERRORS, task_ids), (_ACTIVATION_ERRORS, act_ids)):
        ids = [i for i in ids if is_hex32(i)]
        if ids:
            found.update(
                {r.id: jparse(r.error) for r in run(conn, sql, {"i": inst["id"], "ids": ids}) if r.error}
            )
    out: dict[str, Any] = {}
    for e in items:
        key = "task_id" if e["type"] in _TASK_ERROR_EVENTS else "activation_id"
        if e["type"] in _TASK_ERROR_EVENTS + _STEP_ERROR_EVENTS and e["body"].get(key) in found:
            out[e["id"]] = found[e["body"][key]]
    return out
