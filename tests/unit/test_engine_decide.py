"""Unit tests of the engine's pure decisions (no database, no clock)."""

from __future__ import annotations

from app.engine.decide import progress as dp
from app.engine.decide import signals as dsig
from app.engine.decide import stopping as ds
from app.engine.decide import tasks as dt
from app.engine.decide import wakes as dw
from app.engine.decide.model import (
    Activate,
    Cancel,
    Collect,
    Compensate,
    CompensationFailed,
    CompleteStep,
    Consume,
    End,
    FailStep,
    Finish,
    Ignore,
    Inst,
    Pause,
    Poll,
    PollFail,
    PollNextRound,
    PollRetry,
    Refuse,
    Reject,
    RetryTask,
    SetProgress,
    SettleCancel,
    Snapshot,
    Step,
    Stop,
    WaitInFlight,
)

RUN = Inst(id="i", state="RUNNING")


def snap(*steps: Step, **inst: object) -> Snapshot:
    return Snapshot(Inst(id="i", **{"state": "RUNNING", **inst}), steps)  # type: ignore[arg-type]


def test_progress_activates_steps_whose_dependencies_succeeded() -> None:
    s = snap(
        Step("a", "TASK", "SUCCEEDED"),
        Step("b", "TASK", "BLOCKED", ("a",)),
        Step("c", "TASK", "BLOCKED", ("b",)),
    )
    assert dp.progress(s) == Activate(("b",))


def test_progress_paused_or_reviewed_starts_nothing() -> None:
    steps = (Step("a", "TASK", "BLOCKED"),)
    assert dp.progress(snap(*steps, paused=True)) == SetProgress("RUNNING")
    assert dp.progress(snap(*steps, state="NEEDS_REVIEW")) == SetProgress(None)


def test_progress_states_and_end() -> None:
    assert dp.progress(snap(Step("a", "TIMER", "WAITING"))) == SetProgress("WAITING")
    assert dp.progress(snap(Step("a", "TASK", "ACTIVE"), Step("b", "TIMER", "WAITING"))) == SetProgress(
        "RUNNING"
    )
    assert dp.progress(snap(Step("a", "TASK", "SUCCEEDED"))) == Finish()
    assert dp.progress(snap(Step("a", "TASK", "ACTIVE"), state="CANCELLING")) == SettleCancel()
    assert dp.progress(snap(Step("a", "TASK", "ACTIVE"), state="FAILED")) is None


def test_task_ended_retry_policy() -> None:
    step = Step("a", "TASK", "ACTIVE", activation_id="act", task_attempts=1)
    task = {"id": "t", "activation_id": "act"}
    spec = {"retry": {"max_attempts": 3, "backoff_seconds": 10}}
    assert dt.task_ended(RUN, step, task, spec, "completed", {"x": 1}) == CompleteStep({"x": 1})
    assert dt.task_ended(RUN, step, task, spec, "failed", {"retryable": True}) == RetryTask(2, 10)
    assert dt.task_ended(RUN, step, task, spec, "failed", {"retryable": False, "message": "no"}) == FailStep(
        {"code": "TASK_FAILED", "message": "no", "task_id": "t"}
    )
    last = Step("a", "TASK", "ACTIVE", activation_id="act", task_attempts=3)
    assert (
        dt.task_ended(RUN, last, task, spec, "failed", {"code": "TASK_TIMEOUT"}).error["code"]
        == "TASK_TIMEOUT"
    )
    stale = {"id": "t", "activation_id": "older"}
    assert isinstance(dt.task_ended(RUN, step, stale, spec, "completed", {}), Ignore)


def test_task_ended_during_cancel_is_collected() -> None:
    inst = Inst(id="i", state="CANCELLING", cancel_requested=True, stop_requested=True)
    step = Step("a", "POLL", "ACTIVE", activation_id="act")
    task = {"id": "t", "activation_id": "act"}
    assert dt.task_ended(inst, step, task, {}, "completed", {"done": True}) == Collect(
        "SUCCEEDED", {"done": True}
    )
    assert dt.task_ended(inst, step, task, {}, "completed", {"done": False}).state == "CANCELLED"
    assert dt.task_ended(inst, step, task, {}, "failed", {}).state == "FAILED"


def test_retry_backoff_curve() -> None:
    assert [dt.retry_delay_seconds({}, n) for n in range(1, 8)] == [30, 60, 120, 240, 480, 900, 900]
    assert dt.retry_delay_seconds({"backoff_seconds": 0}, 3) == 0


def test_poll_rounds() -> None:
    spec = {"max_attempts_per_round": 2, "max_rounds": 3}
    p = Poll(used_rounds=0, round_attempts=1)
    assert dt.poll_round(p, spec, "completed", {"done": True}, next_round_late=False) == CompleteStep(
        {"done": True}
    )
    assert dt.poll_round(p, spec, "failed", {}, next_round_late=False) == PollRetry()
    assert dt.poll_round(p, spec, "completed", {"done": False}, next_round_late=False) == PollNextRound(1, 2)
    assert dt.poll_round(p, spec, "completed", {}, next_round_late=True) == PollFail(
        1, {"code": "POLL_DEADLINE_EXCEEDED"}
    )
    assert (
        dt.poll_round(Poll(2, 2), spec, "failed", {}, next_round_late=False).error["code"] == "POLL_EXHAUSTED"
    )


def test_control_decisions() -> None:
    assert ds.control(RUN, "PAUSE", 1) == Pause()
    assert isinstance(ds.control(RUN, "PAUSE", 2), Refuse)
    assert ds.control(Inst(id="i", state="RUNNING", paused=True), "PAUSE", 1) == Refuse(
        "the workflow is already paused"
    )
    assert isinstance(ds.control(RUN, "RESUME", 1), Refuse)
    assert ds.control(RUN, "CANCEL", 1) == Cancel()
    assert isinstance(ds.control(Inst(id="i", state="SUCCEEDED"), "CANCEL", 1), Refuse)


def test_cancel_settle_waits_for_in_flight_then_stops() -> None:
    c = Inst(id="i", state="CANCELLING", cancel_requested=True)
    assert ds.finish_cancel(c, 1) == WaitInFlight()
    assert ds.finish_cancel(c, 0) == Stop("CANCELLED")
    running_chain = Inst(id="i", state="CANCELLING", compensation={"state": "RUNNING"})
    assert isinstance(ds.finish_cancel(running_chain, 0), Ignore)


def test_saga_chain() -> None:
    specs = {"a": {"compensation": {"queue": "u"}}, "b": {}, "c": {"compensation": {"queue": "v"}}}
    done = [
        {"step_key": "a", "activation_id": "1", "order": 1},
        {"step_key": "b", "activation_id": "2", "order": 2},
        {"step_key": "c", "activation_id": "3", "order": 3},
    ]
    plan = ds.compensation_plan(done, specs)
    assert [p["step_key"] for p in plan] == ["c", "a"]
    assert ds.stop([], "FAILED") == End("FAILED")
    first = ds.stop(plan, "CANCELLED")
    assert isinstance(first, Compensate) and first.comp["index"] == 0
    inst = Inst(id="i", state="CANCELLING", stop_kind="CANCEL", compensation={**first.comp, "task_id": "t0"})
    assert isinstance(ds.compensation_task_ended(inst, "other", True), Ignore)
    assert isinstance(ds.compensation_task_ended(inst, "t0", False), CompensationFailed)
    nxt = ds.compensation_task_ended(inst, "t0", True)
    assert isinstance(nxt, Compensate) and nxt.comp["index"] == 1 and "task_id" not in nxt.comp
    last = Inst(id="i", state="CANCELLING", stop_kind="CANCEL", compensation={**nxt.comp, "task_id": "t1"})
    end = ds.compensation_task_ended(last, "t1", True)
    assert isinstance(end, End) and end.state == "CANCELLED" and end.comp["state"] == "DONE"


def test_signal_decisions() -> None:
    assert isinstance(dsig.target("s", 3, 1), Refuse)
    assert dsig.target("s", 1, 0) == dsig.PENDING_EARLY
    assert dsig.target("s", 1, 2) == dsig.STALE
    assert dsig.target("s", 2, 2) == dsig.PENDING_NOW
    step = Step("s", "SIGNAL", "WAITING", activation_id="a")
    wait = {
        "kind": "SIGNAL",
        "state": "WAITING",
        "name": "n",
        "payload_version": "v1",
        "correlation_key": "k",
    }
    sig = {"name": "n", "payload_version": "v1", "correlation_key": "k"}
    assert dsig.offer(step, wait, sig) == Consume()
    assert dsig.offer(step, wait, {**sig, "correlation_key": "k "}) == Reject("CORRELATION_MISMATCH")
    assert dsig.offer(step, {**wait, "state": "EXPIRED"}, sig) == Reject("WAIT_CLOSED")


def test_wakes_and_child() -> None:
    waiting = Step("t", "TIMER", "WAITING")
    assert dw.timer_due(waiting) is None
    assert isinstance(dw.timer_due(Step("t", "TIMER", "SUCCEEDED")), Ignore)
    poll_step = Step("p", "POLL", "WAITING")
    assert dw.poll_wake(poll_step, Poll(1, 0), 2) is None
    assert isinstance(dw.poll_wake(poll_step, Poll(1, 0), 3), Ignore)
    assert dw.poll_wake(poll_step, Poll(1, 0, past_deadline=True), 2) == FailStep(
        {"code": "POLL_DEADLINE_EXCEEDED"}
    )
    active = Step("c", "SUBWORKFLOW", "ACTIVE")
    assert dw.child_ended(active, "k", "k", "SUCCEEDED", {"o": 1}) == CompleteStep({"o": 1})
    assert dw.child_ended(active, "k", "k", "CANCELLED", None).error["code"] == "CHILD_FAILED"
    assert isinstance(dw.child_ended(active, "k", "other", "SUCCEEDED", None), Ignore)
    assert isinstance(ds.deadline_passed(RUN, False), Ignore)
    assert ds.deadline_passed(RUN, True).state == "FAILED"
