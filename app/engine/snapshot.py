"""Load what the decisions read, once per decision, under the instance lock: the instance and its
steps as ``decide.model`` values (database-time comparisons are made here, in SQL), and the mapping
context (input, business key, outputs of succeeded steps)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, overload

from sqlalchemy import Connection

from app.engine.decide.fanout import Element, Progress
from app.engine.decide.model import Inst, Poll, Snapshot, Step
from app.engine.row_access import MISSING, jparse, read_instance, read_steps
from app.engine.states import StepState
from app.sql import query, run


def inst_model(inst: dict) -> Inst:
    return Inst(
        id=inst["id"],
        state=inst["state"],
        paused=inst["paused"],
        cancel_requested=inst["cancel_requested_at"] is not None,
        stop_requested=inst["stop_requested_at"] is not None,
        stop_kind=inst["stop_kind"],
        compensation=inst.get("compensation"),
        control_revision=inst["control_revision"],
    )


@overload
def step_model(step: dict[str, Any]) -> Step: ...
@overload
def step_model(step: dict[str, Any] | None) -> Step | None: ...
def step_model(step: dict[str, Any] | None) -> Step | None:
    if step is None:
        return None
    return Step(
        key=step["key"],
        kind=step["kind"],
        state=step["state"],
        after=tuple(step["after"]),
        activation_id=step["activation_id"],
        activation_sequence=step["activation_sequence"] or 0,
        task_attempts=step.get("task_attempts") or 0,
    )


def load(
    conn: Connection, instance_id: str, inst: dict | None = None
) -> tuple[dict, Snapshot, dict[str, dict]]:
    """The instance row, the decision snapshot of it and its steps, and the step rows by key (the
    instance row is locked by the caller). ``inst``: the instance row as read before, when the caller
    knows that nothing wrote it since (only the steps are read then)."""
    inst = inst if inst is not None else read_instance(conn, instance_id)
    by_key = {r["key"]: r for r in read_steps(conn, instance_id)}
    return inst, of(inst, by_key), by_key


def of(inst: dict, rows: dict[str, dict]) -> Snapshot:
    """The decision snapshot of an instance row and its step rows (by key)."""
    return Snapshot(inst=inst_model(inst), steps=tuple(step_model(s) for s in rows.values()))


_POLL = query(
    "snapshot_poll_read",
    """
SELECT poll_used_rounds, poll_round_attempts, poll_current_task_id, poll_deadline_at <= now() AS past_deadline,
       now() + make_interval(secs => :interval) > poll_deadline_at AS next_round_late
FROM workflow_steps WHERE activation_id = :id
""",
)


def poll(conn: Connection, activation_id: str, interval_seconds: float = 0) -> tuple[Poll, bool]:
    """A POLL activation's bookkeeping and whether a round started ``interval_seconds`` from now
    would start after the poll deadline."""
    r = run(conn, _POLL, {"id": activation_id, "interval": interval_seconds}).first()
    return Poll(r.poll_used_rounds, r.poll_round_attempts, r.poll_current_task_id, r.past_deadline), bool(
        r.next_round_late
    )


def mapping_context(conn: Connection, inst: dict, steps: Iterable[dict] | None = None) -> dict[str, Any]:
    """What mappings read: the input, the business key and the outputs of the succeeded steps. With the
    instance's step rows at hand (``steps``: every step, as read under the instance's lock or as the moves
    since then returned them, ``act_output`` as stored), the outputs are theirs; without, they are read
    when a mapping first refers to one (``$.steps...``)."""
    outputs: Mapping[str, Any]
    if steps is not None:
        outputs = {
            s["key"]: s["act_output"]
            for s in steps
            if s["state"] == StepState.SUCCEEDED and s["act_output"] is not MISSING
        }
    else:
        outputs = _Outputs(conn, inst["id"])
    return {"input": inst["input"], "business_key": inst["business_key"], "steps": outputs}


_SNAPSHOT_STEP_OUTPUTS = query(
    "snapshot_step_outputs",
    "SELECT s.key, s.act_output::text AS output FROM workflow_steps s "
    "WHERE s.instance_id = :id AND s.state = 'SUCCEEDED'",
)


class _Outputs(Mapping[str, Any]):
    """The outputs of an instance's succeeded steps by key, read with one statement on first use (in
    the transaction of the mapping that needs them)."""

    def __init__(self, conn: Connection, instance_id: str) -> None:
        self._conn, self._id = conn, instance_id
        self._read: dict[str, Any] | None = None

    def _all(self) -> dict[str, Any]:
        if self._read is None:
            rows = run(
                self._conn,
                _SNAPSHOT_STEP_OUTPUTS,
                {"id": self._id},
            )
            found = {r.key: jparse(r.output) for r in rows}
            self._read = {k: v for k, v in found.items() if v is not MISSING}
        return self._read

    def __getitem__(self, key: str) -> Any:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


# A fan-out activation's element counts and the ended task's element (``decide.fanout``), through the
# instance's task index: one statement per element end, counting (no JSON read).
_ELEMENT_COUNTS = query(
    "fanout_element_counts",
    """
WITH e AS (
    SELECT element, state, attempt, next_attempt_at FROM workflow_tasks
    WHERE instance_id = :i AND activation_id = :a AND element IS NOT NULL
)
SELECT (SELECT count(DISTINCT element) FROM e) AS started,
       -- an element whose next attempt waits for its backoff (``next_attempt_at``) is still running
       (SELECT count(*) FROM e WHERE state IN ('PENDING', 'CLAIMED') OR next_attempt_at IS NOT NULL) AS running,
       (SELECT count(*) FROM e WHERE state = 'COMPLETED') AS done,
       t.element, t.state, t.attempt, t.id, t.error::text AS error,
       NOT EXISTS (SELECT 1 FROM e WHERE e.element = t.element AND e.attempt > t.attempt) AS latest
FROM workflow_tasks t WHERE t.id = :t
""",
)
# the latest task of every started element (read once, when the step fails)
_ELEMENTS = query(
    "fanout_elements",
    """
SELECT DISTINCT ON (element) element, state, attempt, id, error::text AS error
FROM workflow_tasks WHERE instance_id = :i AND activation_id = :a AND element IS NOT NULL
ORDER BY element, attempt DESC
""",
)
_ELEMENT_OUTPUTS = query(
    "fanout_element_outputs",
    """
SELECT DISTINCT ON (element) element, state, output::text AS output
FROM workflow_tasks WHERE instance_id = :i AND activation_id = :a AND element IS NOT NULL
ORDER BY element, attempt DESC
""",
)


def fanout_progress(
    conn: Connection, instance_id: str, activation_id: str, total: int, task_id: str
) -> tuple[Progress, Element | None]:
    """The element counts of a fan-out activation, and the element of task ``task_id`` (None when
    that task is not the latest of its element)."""
    r = run(conn, _ELEMENT_COUNTS, {"i": instance_id, "a": activation_id, "t": task_id}).one()
    ended = None
    if r.latest and r.element is not None:
        ended = Element(r.element, r.state, r.attempt, r.id, None if r.error is None else jparse(r.error))
    return Progress(total, r.started, r.running, r.done), ended


# A fan-out's children (a SUBWORKFLOW step with ``for_each``): one instance per started element, found by the
# parent's activation (``ix_workflow_instances_fanout``).
_CHILD_COUNTS = query(
    "fanout_child_counts",
    """
SELECT count(*) AS started,
       count(*) FILTER (WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')) AS running,
       count(*) FILTER (WHERE state = 'SUCCEEDED') AS done
FROM workflow_instances WHERE parent_activation_id = :a
""",
)
_CHILDREN = query(
    "fanout_children",
    """
SELECT parent_element AS element, id, state, error::text AS error, output::text AS output
FROM workflow_instances WHERE parent_activation_id = :a ORDER BY parent_element
""",
)


def fanout_child_progress(conn: Connection, activation_id: str, total: int) -> Progress:
    """The element counts of a fan-out activation whose elements are child workflows."""
    r = run(conn, _CHILD_COUNTS, {"a": activation_id}).one()
    return Progress(total, r.started, r.running, r.done)


def fanout_children(conn: Connection, activation_id: str) -> list[dict[str, Any]]:
    """Every started child of a fan-out activation in element order: ``element``, ``id``, ``state`` (the
    instance's), ``error`` and ``output`` (parsed; None when absent)."""
    return [
        {
            "element": r.element,
            "id": r.id,
            "state": r.state,
            "error": None if r.error is None else jparse(r.error),
            "output": None if r.output is None else jparse(r.output),
        }
        for r in run(conn, _CHILDREN, {"a": activation_id})
    ]


def fanout_elements(conn: Connection, instance_id: str, activation_id: str) -> list[Element]:
    """The latest task of every started element of a fan-out activation."""
    rows = run(conn, _ELEMENTS, {"i": instance_id, "a": activation_id}).all()
    return [
        Element(r.element, r.state, r.attempt, r.id, None if r.error is None else jparse(r.error))
        for r in rows
    ]


def fanout_outputs(conn: Connection, instance_id: str, activation_id: str, total: int) -> list[Any]:
    """The outputs of a fan-out's elements in element order (null for an element without output)."""
    out: list[Any] = [None] * total
    for r in run(conn, _ELEMENT_OUTPUTS, {"i": instance_id, "a": activation_id}):
        if r.state == "COMPLETED" and r.output is not None and r.element < total:
            out[r.element] = jparse(r.output)
    return out
