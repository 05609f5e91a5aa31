"""How an instance stops (W-CTL, X-AUTO): control decisions, cancel settlement and the saga chain
(compensations one after another in reverse completion order, the end only after the last)."""

from __future__ import annotations

from typing import Any

from app.engine.decide.model import (
    Cancel,
    Compensate,
    CompensationFailed,
    End,
    Ignore,
    Inst,
    Pause,
    Refuse,
    Resume,
    Stop,
    WaitInFlight,
)
from app.engine.states import TERMINAL, CompensationState, InstanceState, StopKind

PAUSE, RESUME, CANCEL = "PAUSE", "RESUME", "CANCEL"


def control(inst: Inst, operation: str, expected_control_revision: int) -> Pause | Resume | Cancel | Refuse:
    """An operator's decision, made on ``expected_control_revision`` (W-CTL-1)."""
    if inst.control_revision != expected_control_revision:
        return Refuse(
            f"expected_control_revision {expected_control_revision} is stale: the control revision "
            f"is {inst.control_revision}; read the workflow and decide again"
        )
    if inst.state in TERMINAL:
        return Refuse(f"the workflow is {inst.state}")
    if operation == PAUSE:
        if inst.paused:
            return Refuse("the workflow is already paused")
        if inst.stop_requested:
            return Refuse(
                "a cancel was requested or the workflow is failing: it is settling (compensations) and "
                "cannot be paused"
            )
        return Pause()
    if operation == RESUME:
        return Resume() if inst.paused else Refuse("the workflow is not paused")
    return cancel_allowed(inst)


def cancel_allowed(inst: Inst) -> Cancel | Refuse:
    if inst.cancel_requested:
        return Refuse("a cancel was already requested")
    if inst.stop_requested:
        return Refuse("the workflow is failing: its compensations are running")
    return Cancel()


def chain_running(comp: dict[str, Any] | None) -> bool:
    """A compensation chain is in progress (running, or failed and waiting for an operator)."""
    if not comp:
        return False
    return comp.get("state") in (CompensationState.RUNNING, CompensationState.FAILED)


def final_state(inst: Inst) -> str:
    return InstanceState.CANCELLED if inst.stop_kind == StopKind.CANCEL else InstanceState.FAILED


def finish_cancel(inst: Inst, in_flight: int) -> Ignore | WaitInFlight | Stop:
    """CANCELLING with nothing in flight: compensations, then CANCELLED (``Stop``). A chain under way
    is left to itself; claimed tasks keep their permit until they end (W-CTL-3)."""
    if inst.state != InstanceState.CANCELLING or chain_running(inst.compensation):
        return Ignore(f"the workflow is {inst.state}")
    if in_flight:
        return WaitInFlight()
    return Stop(InstanceState.CANCELLED)


def compensation_plan(done: list[dict[str, Any]], specs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Completed TASK steps that declare a compensation, newest completion first (``done`` items:
    ``step_key``, ``activation_id``, ``order`` = a value that grows with completion time)."""
    ordered = sorted(done, key=lambda d: d["order"], reverse=True)
    return [
        {
            "step_key": d["step_key"],
            "activation_id": d["activation_id"],
            "queue": specs[d["step_key"]]["compensation"]["queue"],
        }
        for d in ordered
        if isinstance(specs.get(d["step_key"], {}).get("compensation"), dict)
    ]


def stop(plan: list[dict[str, Any]], state: str) -> End | Compensate:
    """The instance stops as ``state``: now when nothing is to compensate, else compensation 0 first."""
    if not plan:
        return End(state)
    return Compensate({"plan": plan, "index": 0, "state": CompensationState.RUNNING, "final": state})


def compensation_task_ended(
    inst: Inst, task_id: str, completed: bool
) -> Ignore | CompensationFailed | End | Compensate:
    """Compensation task ``task_id`` ended: only the one the chain waits for moves it."""
    comp = inst.compensation or {}
    if comp.get("state") != CompensationState.RUNNING or comp.get("task_id") != task_id:
        return Ignore("not the compensation the chain waits for")
    if not completed:
        return CompensationFailed({**comp, "state": CompensationState.FAILED})
    return compensation_next(inst, comp)


def compensation_next(inst: Inst, comp: dict[str, Any]) -> End | Compensate:
    """Compensation ``comp["index"]`` is done (completed, or handled by an operator)."""
    nxt = {k: v for k, v in comp.items() if k != "task_id"}
    nxt.update(index=comp["index"] + 1, state=CompensationState.RUNNING)
    if nxt["index"] < len(nxt["plan"]):
        return Compensate(nxt)
    done = {**nxt, "index": len(nxt["plan"]), "state": CompensationState.DONE}
    return End(comp.get("final") or final_state(inst), done)


def compensation_issue(inst: Inst, index: int) -> Ignore | dict[str, Any]:
    """The ``compensation_action`` job for ``index``: the plan item, when it is the one to issue."""
    comp = inst.compensation or {}
    if comp.get("state") != CompensationState.RUNNING or comp.get("index") != index or comp.get("task_id"):
        return Ignore(f"compensation {index + 1} is not the one the chain waits to issue")
    item: dict[str, Any] = comp["plan"][index]
    return item


def deadline_passed(inst: Inst, due: bool) -> Ignore | Stop:
    if not due:
        return Ignore("deadline not reached")
    if inst.stop_requested:
        return Ignore("the workflow is already stopping")
    return Stop(
        InstanceState.FAILED, {"code": "DEADLINE_EXCEEDED", "message": "the workflow deadline passed"}
    )
