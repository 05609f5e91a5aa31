"""The one driver of the engine: under the instance lock, load a snapshot, ask a pure decision
(``app.engine.decide``), apply its effect through the transitions and the ledger, and repeat until
nothing changes (``make_progress``). Every event that moves a step forward in its life comes through
here:

- ``make_progress``  after any change: activate ready steps (and offer them early signals), finish
                       a succeeded instance, settle a pending cancel, or recompute RUNNING / WAITING;
- ``complete_step`` / ``fail_step``  a step's current activation ended (task, timer, signal, child, poll);
- ``task_ended``       a task's result or time-out: the retry policy, the POLL rounds, a cancel's
                       collection, a compensation task.

Callers (``task_protocol``, ``control``, ``signals``, ``recovery``, ``instances`` and the job handlers
in ``handlers/``) hold the instance lock; nothing here calls back into them.

Step moves made elsewhere, and why (each then settles progress here, or ends the instance):
- the moves that stop steps: ``stopping`` (a cancel or a failure closes the open steps, sends those of an
  unknown outcome to review, and records the outcome of a task that ends while its instance cancels);
- a signal consumed by a wait: ``signal_match`` succeeds the step with the signal's payload (it decides
  between competing signals, which the driver does not see);
- an operator's recovery: ``recovery`` closes a step (SUCCEED_STEP / FAIL_STEP) or ends its activation
  and starts the next (RETRY_STEP, through ``activation.activate``);
- bookkeeping that changes no step state: a TIMER or signal-timeout wait resolved by its job
  (``handlers/timers``, which then calls ``complete_step`` / ``fail_step``), a child recorded on its
  activation (``handlers/subprocess``), the steps of a new instance (``instances``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sqlalchemy import Connection

from app.engine import activation, audit_entries, jobs_and_tasks, mapping, signal_match, snapshot, stopping
from app.engine.decide import fanout as decide_fanout
from app.engine.decide import progress as decide_progress
from app.engine.decide import tasks as decide_tasks
from app.engine.decide.model import (
    Activate,
    Collect,
    CompleteStep,
    FailStep,
    Finish,
    Ignore,
    PollFail,
    PollNextRound,
    PollRetry,
    RetryTask,
    SetProgress,
    SettleCancel,
    Skip,
    Snapshot,
)
from app.engine.row_access import MISSING, read_instance, read_steps, step_specs, version_document
from app.engine.states import STEP_OPEN, InstanceState, StepKind, StepState
from app.engine.transitions import instance_moves, step_moves, task_moves, wait_moves
from app.engine.transitions._guard import TransitionRefused
from app.ledger.states import JobType
from app.sql import query, run

# a generous bound: every iteration activates at least one step or ends the loop
MAX_ROUNDS = 10_000


def make_progress(
    conn: Connection,
    instance_id: str,
    inst: dict | None = None,
    rows: dict[str, dict] | None = None,
    *,
    new: bool = False,
) -> dict:
    """Activate every step whose dependencies succeeded, then recompute the instance state. ``inst``:
    the instance row, when the caller has just read or written it (a new instance) and nothing wrote it
    since; an Activate round writes no column of the instance row either, so the next round reuses it.
    ``rows``: the step rows by key, likewise (a new instance's, as inserted); an Activate round that
    consumed no early signal moved only the steps it activated, so the next round reuses them too.
    ``new``: the instance was inserted by this transaction (a start), already RUNNING at the revision of
    its first move (``instance_moves.create``): a start that leaves it RUNNING writes its row no more,
    one that leaves it WAITING writes the state alone."""
    pinned = _Pinned(conn)
    for _ in range(MAX_ROUNDS):
        if rows is None:
            inst, snap, rows = snapshot.load(conn, instance_id, inst)
        else:
            assert inst is not None
            snap = snapshot.of(inst, rows)
        pinned.version_id = inst["definition_version_id"]
        # the conditions and their context are read only for a step whose dependencies settled
        mctx = snapshot.mapping_context(conn, inst, rows.values())
        effect = decide_progress.progress(snap, pinned, mctx)
        if effect is None:
            return inst
        doc = pinned.document()
        if isinstance(effect, Skip):
            for key, code, message in effect.items:
                step_moves.skip(conn, instance_id, rows[key], code, message)
                audit_entries.advance(
                    conn,
                    inst,
                    "workflow.step.skipped",
                    target_type="step",
                    target_id=key,
                    after={"step_key": key, "code": code, "message": message},
                )
                rows = {
                    **rows,
                    key: {
                        **rows[key],
                        "state": StepState.SKIPPED,
                        "revision": rows[key]["revision"] + 1,
                        "stored": True,
                    },
                }
            continue
        if isinstance(effect, Activate):
            specs = step_specs(doc)
            # the instance's move that the next round would decide, written by the round's last activation
            # (one statement less), when the round's activations move nothing but their own steps
            follow = None if new else _progress_after(snap, rows, effect.keys, specs, pinned, mctx)
            activated: dict[str, dict] = {}
            moved = None
            for key in effect.keys:  # activating one step does not move another: the loaded rows hold
                step = rows[key]
                try:
                    if follow is not None and key == effect.keys[-1]:
                        activated[key], moved = activation.activate_then_progress(
                            conn, inst, step, specs[key], mctx, follow
                        )
                    else:
                        activated[key] = activation.activate(conn, inst, step, specs[key], mctx)
                except mapping.MappingTooLarge as exc:  # the step fails with the reason, once
                    refused = activation.activate_refused(conn, inst, step)
                    return fail_step(conn, instance_id, refused, exc.error())
            if follow is not None:
                after = decide_progress.progress(snapshot.of(inst, {**rows, **activated}), pinned, mctx)
                if after != SetProgress(follow):  # the rule and its prediction disagree: a bug, rolled back
                    raise RuntimeError(f"workflow {instance_id}: predicted {follow}, decided {after}")
                return instance_moves.progressed(conn, instance_id, follow, moved)
            waiting = [k for k in effect.keys if specs[k]["kind"] in (StepKind.SIGNAL, StepKind.POLL)]
            if signal_match.consume_early(conn, inst, waiting):
                rows = None  # a signal moved a step on: read them again
            else:
                rows = {**rows, **activated}
            # a fan-out over an empty array has no element to run: it succeeds with []
            empty = [
                k for k, r in activated.items() if "for_each" in specs[k] and r["act_input"]["items"] == []
            ]
            for key in empty:
                step_moves.succeed(conn, activated[key], [])
                _audit_step(conn, instance_id, activated[key], "succeeded")
                rows = None
            continue  # with ``inst``: activations, tasks, waits, jobs and events leave the instance row as it was
        if isinstance(effect, SettleCancel):
            return stopping.finish_cancel(conn, instance_id)
        if isinstance(effect, Finish):
            try:
                output = (
                    mapping.resolve(doc["output"], snapshot.mapping_context(conn, inst, rows.values()))
                    if "output" in doc
                    else None
                )
            except mapping.MappingTooLarge as exc:
                return stopping.stop(
                    conn, inst, InstanceState.FAILED, error={"step_key": None, **exc.error()}
                )
            return stopping.finish(conn, inst, InstanceState.SUCCEEDED, output=output)
        assert isinstance(effect, SetProgress)
        if new and effect.state is not None:
            if effect.state == inst["state"]:
                return inst  # the row was inserted as this move leaves it
            return instance_moves.set_progress(conn, instance_id, effect.state, bump=False)
        if effect.state is None:
            return instance_moves.touch(conn, instance_id)
        return instance_moves.set_progress(conn, instance_id, effect.state)
    raise RuntimeError(f"workflow {instance_id}: progress did not settle")  # pragma: no cover


def _progress_after(
    snap: Snapshot,
    rows: dict[str, dict],
    keys: tuple[str, ...],
    specs: dict,
    pinned: Mapping[str, Any],
    mctx: dict,
) -> str | None:
    """The instance's move after activating ``keys`` (``decide.progress.progress_after_activation``), when
    each is a first activation (no row yet) that moves nothing but its own step
    (``activation.moves_nothing_else``); None otherwise."""
    if not all(rows[k].get("stored") is False and activation.moves_nothing_else(specs[k]) for k in keys):
        return None
    states = {k: activation.activated_state(specs[k]["kind"]) for k in keys}
    return decide_progress.progress_after_activation(snap, states, pinned, mctx)


class _Pinned(Mapping[str, Any]):
    """The pinned document of the instance being settled, parsed once, and its steps' conditions by
    key (what ``decide.progress`` reads of it): read on first use, which is never for a settled
    instance."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.version_id = ""
        self._doc: dict | None = None
        self._conditions: dict[str, Any] | None = None

    def document(self) -> dict:
        if self._doc is None:
            self._doc = version_document(self._conn, self.version_id)
        return self._doc

    def _all(self) -> dict[str, Any]:
        if self._conditions is None:
            steps = self.document()["steps"]
            self._conditions = {st["key"]: st["condition"] for st in steps if "condition" in st}
        return self._conditions

    def __getitem__(self, key: str) -> Any:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


def _audit_step(conn: Connection, instance_id: str, step: dict, what: str, error: Any = None) -> None:
    after = {"step_key": step["key"], "activation_id": step["activation_id"]}
    if error is not None:
        after["error"] = error
    audit_entries.advance(
        conn,
        {"id": instance_id},
        f"workflow.step.{what}",
        target_type="step",
        target_id=step["key"],
        after=after,
    )


def complete_step(
    conn: Connection,
    instance_id: str,
    step: dict,
    output: Any,
    *,
    inst: dict | None = None,
    rows: dict[str, dict] | None = None,
) -> dict:
    """The current activation succeeded with ``output`` (MISSING = no output); successors start.
    ``inst`` and ``rows`` (the instance row and every step row by key, ``step`` among them), when the
    caller has just read them under the lock: progress then settles without reading them again."""
    stored = step_moves.succeed(conn, step, output)
    return step_succeeded(conn, instance_id, step, stored, inst=inst, rows=rows)


def step_succeeded(
    conn: Connection,
    instance_id: str,
    step: dict,
    stored: Any,
    *,
    inst: dict | None = None,
    rows: dict[str, dict] | None = None,
) -> dict:
    """The current activation of ``step`` (its row as read before) has SUCCEEDED, written with its event
    (``step_moves.succeed``, or a move that closes the step in its own statement: a timer's firing,
    ``wait_moves.try_fire_due``; a task's completion, ``task_moves.complete_closing_step``); ``stored`` is
    its output as the row holds it. The audit entry, then its successors start (``inst`` and ``rows`` as in
    ``complete_step``)."""
    _audit_step(conn, instance_id, step, "succeeded")
    if inst is None or rows is None:
        return make_progress(conn, instance_id)
    settled = {
        **step,
        "state": StepState.SUCCEEDED,
        "act_state": StepState.SUCCEEDED,
        "revision": step["revision"] + 1,
        "act_output": stored,  # as the row holds it: the successors' mappings read it from here
    }
    return make_progress(conn, instance_id, inst, {**rows, step["key"]: settled})


def fail_step(conn: Connection, instance_id: str, step: dict, error: dict) -> dict:
    """The current activation failed without recovery: the instance fails (stop_kind FAILURE) after
    its compensations; with a cancel settling, the cancel decides the end state."""
    step_moves.fail(conn, step, error)
    _audit_step(conn, instance_id, step, "failed", error)
    inst = read_instance(conn, instance_id)
    if inst["cancel_requested_at"] is not None:
        return stopping.finish_cancel(conn, instance_id)
    return stopping.stop(conn, inst, InstanceState.FAILED, error={"step_key": step["key"], **error})


def follow(conn: Connection, instance_id: str, step: dict, verdict: CompleteStep | FailStep) -> None:
    """Apply a step verdict of an outside event (a child ended, a trigger answered)."""
    if isinstance(verdict, CompleteStep):
        complete_step(conn, instance_id, step, verdict.output)
    else:
        fail_step(conn, instance_id, step, verdict.error)


def task_step_spec(conn: Connection, inst: dict, task: dict) -> dict:
    """The spec of ``task``'s step in the instance's pinned document ({} when it names none)."""
    return step_specs(version_document(conn, inst["definition_version_id"])).get(task["step_key"], {})


def completes_with_its_step(inst: dict, task: dict, spec: dict) -> bool:
    """Whether the completion of ``task`` (of the step ``spec``) completes its step when the step is the
    task's current, open activation (``decide.tasks.completes_with_its_step``): then the completion's
    statement closes the step too (``task_moves.complete_closing_step``) and ``task_ended`` is told so
    (``closing``)."""
    return decide_tasks.completes_with_its_step(snapshot.inst_model(inst), task, spec)


def task_ended(
    conn: Connection,
    inst: dict,
    task: dict,
    kind: str,
    value: Any,
    steps: list[dict] | None = None,
    *,
    spec: dict | None = None,
    closing: bool = False,
    stored: Any = MISSING,
) -> None:
    """Apply a task outcome (``kind`` completed / failed; ``value`` output / error) to its step when
    the task belongs to the step's current activation; a compensation task moves the saga instead.
    ``steps``: every step of the instance as ``read_steps`` reads them, when the caller read them under the
    lock after the last step move (with the task's own move: ``task_moves.complete``). ``closing``: the
    completion's statement closed the step when it was the task's and open
    (``task_moves.complete_closing_step``; ``steps`` as they were before it), ``stored`` its output as the
    row holds it (MISSING: the step did not move). ``spec``: the task's step spec (``task_step_spec``), when
    the caller has it."""
    if task.get("purpose") == "COMPENSATION":
        stopping.compensation_task_ended(conn, inst, task, kind, value)
        return
    if steps is None:
        steps = read_steps(conn, inst["id"])
    rows = {r["key"]: r for r in steps}  # make_progress reads them next
    step = rows.get(task["step_key"])
    if spec is None:
        spec = task_step_spec(conn, inst, task)
    if "for_each" in spec:
        _element_ended(conn, inst, step, spec, task, rows)
        return
    verdict = decide_tasks.task_ended(
        snapshot.inst_model(inst), snapshot.step_model(step), task, spec, kind, value
    )
    # closing: the statement's guard is the step row's part of the rule; both say the same, or nothing stays
    if closing:
        moved = stored is not MISSING
        if moved != isinstance(verdict, CompleteStep):
            raise TransitionRefused(
                f"step {task['step_key']} and its activation -> SUCCEEDED", task["id"], sorted(STEP_OPEN)
            )
        if moved:
            assert step is not None  # CompleteStep answers only with the task's step
            step_moves.closed(conn, inst["id"], step, StepState.SUCCEEDED)
            step_succeeded(conn, inst["id"], step, stored, inst=inst, rows=rows)
            return
    if isinstance(verdict, Ignore):
        return
    if isinstance(verdict, Collect):
        stopping.collect(conn, inst, task, verdict)
        return
    assert step is not None
    if verdict == "POLL":
        _poll_task_ended(conn, inst, step, spec, kind, value)
        return
    if isinstance(verdict, CompleteStep):
        output = verdict.output if verdict.output is not MISSING else None
        complete_step(conn, inst["id"], step, output, inst=inst, rows=rows)
    elif isinstance(verdict, RetryTask):
        if verdict.delay <= 0:
            start_next_attempt(conn, inst, step, spec)
        else:  # the step WAITS for its next attempt; a delay_wake job starts it
            step_moves.set_waiting(conn, step)
            jobs_and_tasks.wake(
                conn,
                inst,
                "task_retry",
                key=f"task_retry:{step['activation_id']}:{verdict.attempt}",
                run_at=_db_in(conn, verdict.delay),
                step_key=step["key"],
                activation_id=step["activation_id"],
                attempt=verdict.attempt,
            )
        make_progress(conn, inst["id"])
    else:
        assert isinstance(verdict, FailStep)
        fail_step(conn, inst["id"], step, verdict.error)


_DB_IN = query("db_time_in_seconds", "SELECT now() + make_interval(secs => :d)")


def _element_ended(
    conn: Connection, inst: dict, step: dict | None, spec: dict, task: dict, rows: dict[str, dict]
) -> None:
    """A task of an element of a fan-out step ended (``decide.fanout``): retry the element, start the
    next ones, or settle the step (the elements' outputs in element order, or the first failure).
    ``rows``: every step row by key, read under the lock after the task's move; starting elements
    writes neither a step row nor the instance row, so progress settles on them and on ``inst``
    without reading either again."""
    gate = decide_fanout.gate(snapshot.inst_model(inst), snapshot.step_model(step), task)
    if isinstance(gate, Ignore):
        return
    if isinstance(gate, Collect):
        stopping.collect(conn, inst, task, gate)
        return
    assert step is not None
    items = step["act_input"]["items"]
    progress, ended = snapshot.fanout_progress(
        conn, inst["id"], step["activation_id"], len(items), task["id"]
    )
    verdict = decide_fanout.plan(spec, progress, ended)
    if isinstance(verdict, CompleteStep):
        outputs = snapshot.fanout_outputs(conn, inst["id"], step["activation_id"], len(items))
        complete_step(conn, inst["id"], step, outputs, inst=inst, rows=rows)
        return
    if isinstance(verdict, FailStep):
        first = decide_fanout.first_failure(snapshot.fanout_elements(conn, inst["id"], step["activation_id"]))
        fail_step(conn, inst["id"], step, {**verdict.error, **first})
        return
    indexes: tuple[int, ...]
    if isinstance(verdict, decide_fanout.RetryElement):
        delay = decide_fanout.retry_delay(spec, verdict)
        # with a backoff the element waits (counted as running meanwhile); an element_retry wake starts it
        if delay > 0:
            due = task_moves.element_retry_at(conn, task["id"], delay)
            jobs_and_tasks.wake(
                conn,
                inst,
                "element_retry",
                key=f"element_retry:{step['activation_id']}:{verdict.index}:{verdict.attempt}",
                run_at=due,
                step_key=step["key"],
                activation_id=step["activation_id"],
                element=verdict.index,
                attempt=verdict.attempt,
                task_id=task["id"],
            )
            make_progress(conn, inst["id"])
            return
        indexes, attempt = (verdict.index,), verdict.attempt
    else:
        indexes, attempt = verdict.indexes, 1
    if indexes:
        try:
            activation.start_elements(
                conn, inst, step, spec, items, indexes, snapshot.mapping_context(conn, inst), attempt
            )
        except mapping.MappingTooLarge as exc:
            fail_step(conn, inst["id"], step, {**exc.error(), "element": indexes[0]})
            return
    make_progress(conn, inst["id"], inst, rows)


def element_retry_due(
    conn: Connection, inst: dict, step: dict, spec: dict, task_id: str, attempt: int
) -> dict:
    """The backoff of a fan-out element's failed task ``task_id`` passed (an ``element_retry`` wake): its
    next attempt ``attempt`` starts, unless the step stopped starting elements meanwhile (more failures
    than its tolerance); then the element failed for good and the step settles as the elements end."""
    element = task_moves.element_retry_ended(conn, task_id, step["activation_id"])
    if element is None:
        return {"skipped": "the element no longer waits for its retry"}
    items = step["act_input"]["items"]
    progress, _ = snapshot.fanout_progress(conn, inst["id"], step["activation_id"], len(items), task_id)
    if progress.failed - 1 > spec["for_each"].get("tolerance", 0):
        verdict = decide_fanout.plan(spec, progress, None)
        if isinstance(verdict, FailStep):
            first = decide_fanout.first_failure(
                snapshot.fanout_elements(conn, inst["id"], step["activation_id"])
            )
            fail_step(conn, inst["id"], step, {**verdict.error, **first})
            return {"element": element, "failed": True}
        return {"element": element, "started": False}
    try:
        ids = activation.start_elements(
            conn, inst, step, spec, items, (element,), snapshot.mapping_context(conn, inst), attempt
        )
    except mapping.MappingTooLarge as exc:
        fail_step(conn, inst["id"], step, {**exc.error(), "element": element})
        return {"element": element, "failed": True}
    make_progress(conn, inst["id"])
    return {"element": element, "attempt": attempt, "task_id": ids[0]}


def fanout_top_up(conn: Connection, inst: dict, reason: str) -> int:
    """The parent may start fan-out children again (a resume, a review left): each ACTIVE SUBWORKFLOW
    step with ``for_each`` gets a ``subprocess_spawn`` job, which starts the elements its free places allow
    (``handlers.subprocess``). Returns how many were enqueued."""
    steps = [
        s
        for s in read_steps(conn, inst["id"])
        if s["kind"] == StepKind.SUBWORKFLOW and s["state"] == StepState.ACTIVE
    ]
    if not steps:
        return 0
    specs = step_specs(version_document(conn, inst["definition_version_id"]))
    n = 0
    for s in steps:
        if "for_each" in specs.get(s["key"], {}):
            jobs_and_tasks.job(
                conn,
                inst,
                JobType.SUBPROCESS_SPAWN,
                # its own operation (the operation key is the payload's): not the first spawn's receipt
                {"activation_id": s["activation_id"], "top_up": f"{reason}:{inst['revision']}"},
                key=f"{s['activation_id']}:{reason}:{inst['revision']}",
                step_key=s["key"],
            )
            n += 1
    return n


def _db_in(conn: Connection, seconds: float) -> Any:
    return run(conn, _DB_IN, {"d": seconds}).scalar_one()


def _poll_task_ended(conn: Connection, inst: dict, step: dict, spec: dict, kind: str, value: Any) -> None:
    act = step["activation_id"]
    poll, late = snapshot.poll(conn, act, spec["interval_ms"] / 1000.0)
    verdict = decide_tasks.poll_round(poll, spec, kind, value, next_round_late=late)
    if isinstance(verdict, CompleteStep):
        step_moves.poll_task_ended(conn, act, resolved=True)
        wait_moves.resolve_open(conn, act)
        complete_step(conn, inst["id"], step, verdict.output)
    elif isinstance(verdict, FailStep):
        step_moves.poll_task_ended(conn, act)
        fail_step(conn, inst["id"], step, verdict.error)
    elif isinstance(verdict, PollRetry):
        step_moves.poll_task_ended(conn, act)
        activation.start_poll_round(
            conn, inst, step, spec, used_rounds=poll.used_rounds, round_attempts=poll.round_attempts
        )
        make_progress(conn, inst["id"])
    elif isinstance(verdict, PollFail):
        step_moves.poll_task_ended(conn, act, used=verdict.used)
        fail_step(conn, inst["id"], step, verdict.error)
    else:
        assert isinstance(verdict, PollNextRound)
        step_moves.poll_task_ended(conn, act, used=verdict.used)
        due = step_moves.poll_schedule(conn, act, spec["interval_ms"] / 1000.0)
        jobs_and_tasks.wake(
            conn,
            inst,
            "poll",
            key=f"poll:{act}:{verdict.round}",
            run_at=due,
            step_key=step["key"],
            activation_id=act,
            round=verdict.round,
        )
        step_moves.set_waiting(conn, step)
        make_progress(conn, inst["id"])


def start_next_attempt(conn: Connection, inst: dict, step: dict, spec: dict) -> str:
    """A new task for the next attempt of the step's current activation (own deadline and
    ``task_timeout`` job); the step is ACTIVE again and points at it. The caller settles progress."""
    attempts = step["task_attempts"] + 1
    task_input = step["act_input"] if step["act_input"] is not MISSING else {}
    new_task = jobs_and_tasks.step_task(conn, inst, step, spec, task_input, attempt=attempts)
    step_moves.set_task_attempts(conn, step["activation_id"], attempts)
    step_moves.set_active(conn, step, new_task)
    return new_task
