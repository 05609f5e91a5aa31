"""Row access shared by the engine modules: locks (instance first), reads as exact JSON, views.

JSON columns are selected ``::text`` and parsed with ``app.jsonx`` so numbers stay exact; SQL NULL
(absent) and JSON ``null`` stay different (``MISSING`` vs ``None``)."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterable
from typing import Any, overload

from cachetools import LRUCache
from sqlalchemy import Connection, Row

from app import jsonx
from app.engine import events
from app.engine.states import task_open_sql
from app.errors import NotFound
from app.ids import name_id
from app.ledger.context import Fence
from app.ledger.states import JobType
from app.ledger.transitions import JOB_FENCE_SQL, seconds_left
from app.sql import Query, query, run, split_rows

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING", "__bool__": lambda self: False})()


def jparse(raw: str | None) -> Any:
    return MISSING if raw is None else jsonx.loads_exact_db(raw)


def jdump(value: Any) -> str | None:
    """JSON text for a jsonb parameter; MISSING -> SQL NULL."""
    return None if value is MISSING else jsonx.dumps(value)


# The instance row as the engine reads it (JSON as text, parsed by ``instance_row``); also what the moves
# that write the row return (``RETURNING``), so that they need no read after the write.
INSTANCE_COLUMNS = """id, namespace_id, definition_id, definition_version_id, version, state, revision, paused,
       control_revision, input::text AS input, business_key, queues, deadline_at, output::text AS output,
       cancel_requested_at, stop_kind, stop_requested_at, completed_at, error::text AS error, trace_id,
       parent_instance_id, parent_step_key, parent_activation_id, parent_element, schedule_id, schedule_fire_at, created_at, updated_at, compensation::text AS compensation"""
_INSTANCE = query("instance_read", f"SELECT {INSTANCE_COLUMNS} FROM workflow_instances WHERE id = :id")
# A lock is the first statement of an engine transaction: it also asks what the transaction's first event
# would ask next (``events.known_listeners``: is anyone listening to the namespace's events?).
# The question names the instance's namespace qualified: unqualified, ``namespace_id`` inside it would be
# the listener's own column (anyone listening anywhere would count).
_LOCKED = f"SELECT {INSTANCE_COLUMNS}, {events.listened_sql('i.namespace_id')} AS listened FROM workflow_instances i"
_LOCK = query("instance_lock", _LOCKED + " WHERE i.id = :id FOR UPDATE")
# An engine job's business transaction begins with its instance's lock and then its own fence (the job row,
# locked while its executor owns it: ``app.ledger.transitions.JOB_FENCE_SQL``), in ONE statement: the
# fence is a subquery of the locked instance's row, so it runs (and locks) after the instance is locked
# (instance -> job, L-CLAIM-5), and not at all when there is no such instance. It also answers when the
# instance's watch (its pending ``task_timeout`` job: ``jobs_and_tasks.arm_watch``) is due, in seconds from
# the transaction's now() (NULL: none is pending), so that a job's transaction that opens a task due no
# earlier arms nothing (``jobs_and_tasks.watch_covers``). Type and status are compared as text so that no
# plan reads them from an index of every instance's jobs (``ix_workflow_jobs_status_type``, the claim's
# partial indexes): the instance's own (``ix_workflow_jobs_instance``) is the only one that serves it.
_LOCK_FENCING = query(
    "instance_lock_job_fence",
    f"""WITH i AS MATERIALIZED ({_LOCKED} WHERE i.id = :id FOR UPDATE)
SELECT i.*, ({JOB_FENCE_SQL} AND j.instance_id = i.id FOR UPDATE OF j) AS job_left,
    (SELECT EXTRACT(EPOCH FROM min(w.run_at) - now())::float8 FROM workflow_jobs w
     WHERE w.instance_id = i.id AND w.type::text = '{JobType.TASK_TIMEOUT.value}' AND w.status::text = 'pending') AS watch_in
FROM i""",
)


def _qualified(columns: str, alias: str) -> str:
    """``columns`` (a list of ``name`` or ``name::type AS name`` items) with each column read from
    ``alias``, for a statement that joins another table with the same column names."""
    return ", ".join(re.sub(r"^(\w+)", rf"{alias}.\1", c.strip()) for c in columns.split(","))


def lock_with_task(task_columns: str) -> tuple[Query, tuple[str, ...]]:
    """The instance's lock and its task's (alias ``t``), in one statement (``instance_lock_with_task``):
    ``task_columns`` (``t.name`` or ``<expression> AS name`` items, no comma inside one) come back as
    ``r__<name>``. Returns the statement and the task's column names; made once, at the caller's import,
    for ``lock_instance_and_task``."""
    names, exprs = [], []
    for item in (c.strip() for c in task_columns.split(",")):
        expr, _, name = item.rpartition(" AS ")
        if not expr:
            expr, name = item, item.split(".", 1)[1]
        names.append(name)
        exprs.append(f"{expr} AS r__{name}")
    sql = (
        f"SELECT {_qualified(INSTANCE_COLUMNS, 'i')}, {events.listened_sql('i.namespace_id')} AS listened, "
        f"{', '.join(exprs)} FROM workflow_instances i JOIN workflow_tasks t ON t.instance_id = i.id "
        # locks in this order: the instance first, then its task (the lock order of every transaction)
        "WHERE t.id = :t AND t.namespace_id = :ns FOR UPDATE OF i, t"
    )
    return query("instance_lock_with_task", sql), tuple(names)


@overload
def instance_row(row: Row[Any]) -> dict[str, Any]: ...
@overload
def instance_row(row: Row[Any] | None) -> dict[str, Any] | None: ...
def instance_row(row: Row[Any] | None) -> dict[str, Any] | None:
    """The instance dict of a row with ``INSTANCE_COLUMNS`` (extra columns are kept as they are)."""
    if row is None:
        return None
    d = dict(row._mapping)
    d["input"] = jparse(d["input"])
    d["output"] = jparse(d["output"])
    d["error"] = jparse(d["error"])
    d["compensation"] = None if d["compensation"] is None else jsonx.loads_exact_db(d["compensation"])
    return d


def lock_instance(conn: Connection, instance_id: str) -> dict[str, Any]:
    """Lock order: the instance row first, then tasks / jobs (ARCHITECTURE, L-CLAIM-5)."""
    row = instance_row(run(conn, _LOCK, {"id": instance_id}).first())
    if row is None:
        raise NotFound("workflow not found")
    return _listeners_known(conn, row)


def lock_instance_fencing(
    conn: Connection, instance_id: str, fence: Fence
) -> tuple[dict[str, Any], float | None, float | None]:
    """``lock_instance`` and then the job's fence (``JobContext.transaction``'s ``lock_first``) in one
    statement: the instance, the seconds the job's execution deadline has left (None: the executor no
    longer owns the job, or the deadline passed), and the seconds from the transaction's now() at which
    the instance's pending watch is due (None: none is pending). NotFound when there is no such instance."""
    params = {"id": instance_id, "job_id": fence.job_id, "gen": fence.generation, "token": fence.lease_token}
    row = instance_row(run(conn, _LOCK_FENCING, params).first())
    if row is None:
        raise NotFound("workflow not found")
    left = seconds_left(row.pop("job_left"))
    watch_in = row.pop("watch_in")
    return _listeners_known(conn, row), left, watch_in


def _listeners_known(conn: Connection, row: dict[str, Any]) -> dict[str, Any]:
    events.known_listeners(conn, row["id"], row.pop("listened"), row["trace_id"])
    return row


def lock_instance_and_task(
    conn: Connection, task_id: str, namespace_id: str, locking: tuple[Query, tuple[str, ...]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``lock_instance`` of the instance of task ``task_id`` of ``namespace_id`` and the task's row lock,
    in ONE statement (instance first, then the task: PostgreSQL takes ``FOR UPDATE OF i, t`` in that
    order, and rereads both rows at their latest versions when it had to wait). Returns the instance and
    the task's columns of ``locking`` (``lock_with_task``) as they come (JSON as text). NotFound when
    there is no such task."""
    statement, names = locking
    row = run(conn, statement, {"t": task_id, "ns": namespace_id}).first()
    if row is None:
        raise NotFound("task not found")
    values = row._mapping
    task = {n: values[f"r__{n}"] for n in names}
    inst = instance_row(row)
    for n in names:
        del inst[f"r__{n}"]
    return _listeners_known(conn, inst), task


# An instance's open tasks are read as "not closed" (``states.task_open_sql``: why), by the instance's own
# index (``ix_workflow_tasks_instance``): its few tasks. tests/db/test_open_tasks_plans.py plans each such
# statement so.
# What an ending instance has left open, each read through its index (open tasks by instance, the partial
# indexes of WAITING waits and PENDING signals): one statement instead of an UPDATE per kind that finds
# nothing, for an instance that ends with no work open (most do).
_OPEN_WORK = query(
    "instance_open_work",
    f"""SELECT
    EXISTS (SELECT 1 FROM workflow_tasks WHERE instance_id = :i AND {task_open_sql()}) AS tasks,
    EXISTS (SELECT 1 FROM workflow_waits WHERE instance_id = :i AND state = 'WAITING') AS waits,
    EXISTS (SELECT 1 FROM workflow_signals WHERE instance_id = :i AND state = 'PENDING') AS signals""",
)


def open_work(conn: Connection, instance_id: str) -> Any:
    """Whether the instance has open tasks, waiting waits and pending signals (``tasks``, ``waits``,
    ``signals``). Read under the instance's lock: tasks and waits are made under it; a signal committed
    after this statement's snapshot is missed here as the UPDATE that closes pending signals misses it."""
    return run(conn, _OPEN_WORK, {"i": instance_id}).one()


def read_instance(conn: Connection, instance_id: str, namespace_id: str | None = None) -> dict[str, Any]:
    row = instance_row(run(conn, _INSTANCE, {"id": instance_id}).first())
    if row is None or (namespace_id is not None and row["namespace_id"] != namespace_id):
        raise NotFound("workflow not found")
    return row


# A published version is immutable (X-DEF: inserted once, never updated or deleted), so each process
# keeps the documents it has read, by version id: every advance, start and handler that needs the step
# specs saves a statement. The cache holds the JSON text (each call parses a fresh object, so
# no caller can change another's) and is bounded by its characters, whatever the tenants publish.
DOCUMENT_CACHE_CHARS = 8 * 1024 * 1024
_documents: LRUCache[str, str] = LRUCache(maxsize=DOCUMENT_CACHE_CHARS, getsizeof=len)
_documents_lock = threading.Lock()  # cachetools' caches are not thread-safe


_DOCUMENT = query(
    "definition_version_document", "SELECT document::text FROM workflow_definition_versions WHERE id = :id"
)


def version_document(conn: Connection, version_id: str) -> dict[str, Any]:
    with _documents_lock:
        raw = _documents.get(version_id)
    if raw is None:
        raw = run(conn, _DOCUMENT, {"id": version_id}).scalar_one()
        if len(raw) <= DOCUMENT_CACHE_CHARS // 16:  # one document never evicts most of the others
            with _documents_lock:
                _documents[version_id] = raw
    return jsonx.loads_exact_db(raw)


def step_specs(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["key"]: s for s in document["steps"]}


# What ``read_steps`` needs of a version's steps (key, kind, after), kept per process beside the
# documents: every step read adds the BLOCKED steps, and parsing the whole document for three fields on
# each task completion is work the hot path need not do. Bounded by the steps it holds.
Declared = tuple[tuple[str, str, tuple[str, ...]], ...]
_declared: LRUCache[str, Declared] = LRUCache(maxsize=200_000, getsizeof=len)


def declared_steps(conn: Connection, version_id: str) -> Declared:
    with _documents_lock:
        got = _declared.get(version_id)
    if got is None:
        got = tuple(
            (s["key"], s["kind"], tuple(s.get("after", [])))
            for s in version_document(conn, version_id)["steps"]
        )
        with _documents_lock:
            _declared[version_id] = got
    return got


# A step that has not been activated yet (BLOCKED) has no row: the pinned definition document declares
# it, and the readers below add it, in the shape of a stored row (revision 1, no activation), under the
# id its row gets when it is first activated (``step_row_id``: the same for every reader and the writer).
BLOCKED_STEP: dict[str, Any] = {
    "state": "BLOCKED",
    "revision": 1,
    "activation_id": None,
    "activation_sequence": None,
    "task_id": None,
    "act_state": None,
    "act_input": MISSING,
    "act_output": MISSING,
    "act_error": MISSING,
    "task_attempts": None,
    "child_instance_id": None,
    "activated_at": None,
    "completed_at": None,
    "poll_used_rounds": None,
    "poll_first_round": None,
    "poll_first_round_attempts_used": None,
    "poll_round_attempts": None,
    "poll_deadline_at": None,
    "poll_last_task_id": None,
    "poll_current_task_id": None,
    "poll_next_at": None,
    "poll_resolved_at": None,
}
_STEP_IDS = uuid.UUID("6c1f7e0a-3b5d-4f3e-9a57-2d0c8b1e4f60").bytes


def step_row_id(instance_id: str, key: str) -> str:
    """The id of step ``key`` of ``instance_id``: derived (32 hex), so that a BLOCKED step, which has no
    row, shows the id its row will have once activated."""
    return name_id(_STEP_IDS, f"{instance_id}/{key}")  # uuid5(namespace, name).hex


def blocked_step(instance_id: str, key: str, kind: str, after: Iterable[str]) -> dict[str, Any]:
    """Declared step ``key`` of ``instance_id`` as long as it is not activated, as ``read_steps`` reads it."""
    return {
        "id": step_row_id(instance_id, key),
        "key": key,
        "kind": kind,
        **BLOCKED_STEP,
        "after": list(after),
        "stored": False,
    }


# The columns of a step row, as every reader reads them (JSON as text): (expression, name).
_STEP_COLUMNS = (
    *((f"s.{c}", c) for c in ("id", "key", "kind", "state", "revision", "after", "activation_id")),
    *((f"s.{c}", c) for c in ("activation_sequence", "task_id", "act_state")),
    *((f"s.{c}::text", c) for c in ("act_input", "act_output", "act_error")),
    *((f"s.{c}", c) for c in ("task_attempts", "child_instance_id", "activated_at", "completed_at")),
    *(
        (f"s.{c}", c)
        for c in (
            "poll_used_rounds",
            "poll_first_round",
            "poll_first_round_attempts_used",
            "poll_round_attempts",
            "poll_deadline_at",
            "poll_last_task_id",
            "poll_current_task_id",
            "poll_next_at",
            "poll_resolved_at",
        )
    ),
)


def _steps_sql(prefix: str, instance: str, key: str = "") -> str:
    """The stored steps of instance ``:<instance>`` (step ``:key`` alone with ``key``), one row per step, its
    columns named ``<prefix><name>``; one row of NULL step columns when none is stored, none for an unknown
    instance."""
    columns = ", ".join(f"{e} AS {prefix}{n}" for e, n in _STEP_COLUMNS)
    return (
        f"SELECT i.definition_version_id AS {prefix}version_id, {columns} "
        f"FROM workflow_instances i LEFT JOIN workflow_steps s ON s.instance_id = i.id AND s.kind <> 'ROOT'{key} "
        f"WHERE i.id = :{instance}"
    )


_STEPS_ALL = query("steps_read", _steps_sql("", "id"))
_STEPS_ONE = query("step_read", _steps_sql("", "id", " AND s.key = :key"))


def _step(row: Any) -> dict[str, Any]:
    d = dict(row._mapping)
    del d["version_id"]
    d["stored"] = True  # a row exists (``step_moves.activate`` updates it rather than inserting one)
    for k in ("act_input", "act_output", "act_error"):
        d[k] = jparse(d[k])
    return d


def read_steps(conn: Connection, instance_id: str, key: str | None = None) -> list[dict[str, Any]]:
    """Every declared step of the instance (or step ``key``), by key: the stored rows (activated steps)
    and the BLOCKED ones, which have no row (``blocked_step``). [] for an unknown instance or key."""
    rows = run(conn, _STEPS_ALL if key is None else _STEPS_ONE, {"id": instance_id, "key": key}).all()
    return _declared_steps_of(conn, instance_id, rows, key)


def _declared_steps_of(
    conn: Connection, instance_id: str, rows: list[Any], key: str | None = None
) -> list[dict[str, Any]]:
    if not rows:
        return []
    stored = {r.key: _step(r) for r in rows if r.key is not None}
    for k, kind, after in declared_steps(conn, rows[0].version_id):
        if k not in stored and (key is None or k == key):
            stored[k] = blocked_step(instance_id, k, kind, after)
    return [stored[k] for k in sorted(stored)]


_STEP_PREFIX = "step__"


def _with_steps_sql(write: str, ctes: str = "") -> str:
    """``write`` (after the common table expressions ``ctes``, when given, which it may read), then the
    steps of ``:steps_of_instance`` in its snapshot (``write_reading_steps``)."""
    # the write's row beside the first step row only (a task's output, up to 256 KiB, is not sent once per
    # step); the instance's row makes at least one step row (its LEFT JOIN), so the write's row always comes
    # back when it moved one
    steps = ", ".join(f"st.{_STEP_PREFIX}{n}" for n in ("version_id", *(n for _, n in _STEP_COLUMNS)))
    return (
        f"WITH {ctes + ', ' if ctes else ''}w AS ({write}) SELECT w.*, {steps} FROM (SELECT q.*, row_number() OVER () AS nth FROM "
        f"({_steps_sql(_STEP_PREFIX, 'steps_of_instance')}) q) st LEFT JOIN w ON st.nth = 1 ORDER BY st.nth"
    )


def reading_steps(write: Query) -> Query:
    """The named statement of ``write_reading_steps`` for ``write``: ``<write's name>_reading_steps``;
    made once, at the caller's import."""
    return query(f"{write.name}_reading_steps", _with_steps_sql(write.text, ""))


def reading_steps_after(name: str, ctes: str, write: str) -> Query:
    """The named statement ``name`` of ``write_reading_steps`` whose write is ``ctes`` (data-modifying
    common table expressions, written out in full: a move of two tables in one statement) and ``write``,
    the SELECT of its one row from them; made once, at the caller's import."""
    return query(name, _with_steps_sql(write, ctes))


def write_reading_steps(
    conn: Connection, statement: Query, params: dict[str, Any], instance_id: str
) -> tuple[Any | None, list[dict[str, Any]]]:
    """``statement`` (``reading_steps(write)``): ``write`` (an UPDATE ... RETURNING of ONE row that is not a step, e.g. a task's, with a column that is
    never NULL; no returned column named ``step__...``) and ``read_steps(instance_id)``, in ONE statement:
    (the write's row, the steps), or (None, []) when the write moved no row. The steps are read in the
    write's snapshot, as they were before it: a write that moves a step (``reading_steps_after``) reads that
    step as it was, and its caller settles the row it moved (``wait_moves.try_fire_due``). Run it under the
    instance's lock (every step move holds it), and the steps are the ones a statement of their own would
    read next."""
    rows = run(conn, statement, {**params, "steps_of_instance": instance_id}).all()
    if not rows:
        return None, []
    written, steps = split_rows(rows, _STEP_PREFIX)
    if all(v is None for v in written):  # the write moved no row (its columns are the LEFT JOIN's NULLs)
        return None, []
    return written, _declared_steps_of(conn, instance_id, steps)


def read_step(conn: Connection, instance_id: str, key: str) -> dict[str, Any] | None:
    rows = read_steps(conn, instance_id, key)
    return rows[0] if rows else None


_WAIT = query(
    "wait_read",
    "SELECT id, kind, state, name, payload_version, correlation_key, deadline_at, winner_signal_id, "
    "resolved_at FROM workflow_waits WHERE activation_id = :a",
)


def read_wait(conn: Connection, activation_id: str) -> dict[str, Any] | None:
    row = run(conn, _WAIT, {"a": activation_id}).first()
    return dict(row._mapping) if row else None


_SIGNAL_COLS = """id, namespace_id, instance_id, revision, name, payload_version, target_step_key,
    target_activation_sequence, correlation_key, payload::text AS payload, actor_id, reason, evidence_ref, state,
    disposition, consumed_wait_id, accepted_at, expires_at, resolved_at"""


_SIGNAL = query("signal_read", f"SELECT {_SIGNAL_COLS} FROM workflow_signals WHERE id = :id")


def signal_row(r: Any) -> dict[str, Any]:
    d = dict(r._mapping)
    d["payload"] = jparse(d["payload"])
    return d


def read_signal(conn: Connection, sig_id: str) -> dict[str, Any]:
    r = run(conn, _SIGNAL, {"id": sig_id}).first()
    if r is None:
        raise NotFound("signal not found")
    return signal_row(r)
