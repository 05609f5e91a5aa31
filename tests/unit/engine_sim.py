"""A pure, in-memory model of one workflow instance driven only by ``app.engine.decide`` — the same
decisions the database-backed driver applies — so property tests can push random event sequences
through them and check the engine's invariants without PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from app.engine.decide import progress as dp
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
    End,
    FailStep,
    Finish,
    Ignore,
    Inst,
    Pause,
    Refuse,
    Resume,
    RetryTask,
    SetProgress,
    SettleCancel,
    Skip,
    Snapshot,
    Step,
    Stop,
    WaitInFlight,
)
from app.engine.states import STEP_OPEN, TERMINAL, InstanceState, StepKind, StepState

S, I = StepState, InstanceState  # noqa: E741


class InvariantBroken(AssertionError):
    pass


@dataclass
class Model:
    """One instance: its steps (current activation folded into the step), the activations ever made,
    claimed tasks, completion order and everything the invariants need to see."""

    inst: Inst
    steps: dict[str, Step]
    specs: dict[str, dict]
    claimed: set[str] = field(default_factory=set)  # steps whose current task is claimed
    activations: list[tuple[str, int, str]] = field(default_factory=list)  # (key, seq, state)
    completed: list[str] = field(default_factory=list)  # TASK steps in completion order
    compensations_issued: list[str] = field(default_factory=list)
    ends: list[str] = field(default_factory=list)
    activated_while_paused: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    input: dict = field(default_factory=dict)
    outputs: dict[str, object] = field(default_factory=dict)  # of the succeeded steps
    skipped: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (code, message)
    ever_activated: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ helpers
    def snap(self) -> Snapshot:
        return Snapshot(self.inst, tuple(self.steps.values()))

    def set_step(self, key: str, state: str) -> None:
        st = self.steps[key]
        if st.state not in STEP_OPEN and state not in STEP_OPEN:
            raise InvariantBroken(f"step {key} moved from {st.state} to {state}")
        self.steps[key] = replace(st, state=state)
        self.activations = [
            (k, q, state if (k, q) == (key, st.activation_sequence) else s) for k, q, s in self.activations
        ]
        if state == S.SUCCEEDED and st.kind == StepKind.TASK:
            self.completed.append(key)
        if state not in STEP_OPEN:
            self.claimed.discard(key)

    def set_inst(self, **changes: object) -> None:
        if self.inst.state in TERMINAL:
            raise InvariantBroken(f"instance moved out of terminal {self.inst.state}: {changes}")
        self.inst = replace(self.inst, **changes)  # type: ignore[arg-type]

    def end(self, state: str) -> None:
        self.set_inst(state=state)
        self.ends.append(state)
        for key, st in self.steps.items():
            if st.state in STEP_OPEN and state != I.SUCCEEDED:
                self.set_step(key, S.CANCELLED)

    # ------------------------------------------------------------------ the driver, in memory
    def ctx(self) -> dict:
        return {"input": self.input, "business_key": None, "steps": dict(self.outputs)}

    def settle(self) -> None:
        conds = {k: s["condition"] for k, s in self.specs.items() if "condition" in s}
        for _ in range(300):
            effect = dp.progress(self.snap(), conds, self.ctx())
            if effect is None:
                return
            if isinstance(effect, Skip):
                if self.inst.paused:
                    self.activated_while_paused.extend(k for k, _, _ in effect.items)
                for key, code, message in effect.items:
                    st = self.steps[key]
                    if st.state != S.BLOCKED or key in self.skipped or key in self.ever_activated:
                        raise InvariantBroken(f"skip of {key} in {st.state}")
                    self.steps[key] = replace(st, state=S.SKIPPED)
                    self.skipped[key] = (code, message)
                continue
            if isinstance(effect, Activate):
                if self.inst.paused:
                    self.activated_while_paused.extend(effect.keys)
                for key in effect.keys:
                    st = self.steps[key]
                    if any(k == key and s in STEP_OPEN for k, _, s in self.activations):
                        raise InvariantBroken(f"second open activation of {key}")
                    state = S.WAITING if st.kind in (StepKind.TIMER, StepKind.SIGNAL) else S.ACTIVE
                    seq = st.activation_sequence + 1
                    self.steps[key] = replace(
                        st,
                        state=state,
                        activation_sequence=seq,
                        activation_id=f"{key}#{seq}",
                        task_attempts=1 if st.kind == StepKind.TASK else 0,
                    )
                    self.activations.append((key, seq, state))
                    self.ever_activated.append(key)
                continue
            if isinstance(effect, SettleCancel):
                self.finish_cancel()
            elif isinstance(effect, Finish):
                self.end(I.SUCCEEDED)
            elif isinstance(effect, SetProgress) and effect.state is not None:
                self.set_inst(state=effect.state)
            return
        raise InvariantBroken("progress did not settle")

    def stop(self, state: str) -> None:
        done = [
            {"step_key": k, "activation_id": self.steps[k].activation_id, "order": n}
            for n, k in enumerate(self.completed)
            if self.steps[k].state == S.SUCCEEDED
        ]
        verdict = ds.stop(ds.compensation_plan(done, self.specs), state)
        if isinstance(verdict, End):
            self.end(state)
            return
        for key, st in self.steps.items():
            if st.state in STEP_OPEN:
                self.set_step(key, S.CANCELLED)
        kind = "CANCEL" if state == I.CANCELLED else "FAILURE"
        self.set_inst(
            state=I.CANCELLING,
            compensation=verdict.comp,
            stop_requested=True,
            stop_kind=self.inst.stop_kind or kind,
        )
        self.issue()

    def issue(self) -> None:
        comp = self.inst.compensation or {}
        item = ds.compensation_issue(self.inst, comp["index"])
        if isinstance(item, Ignore):
            raise InvariantBroken(f"compensation {comp['index']} not issuable: {item.reason}")
        self.compensations_issued.append(item["step_key"])
        self.set_inst(compensation={**comp, "task_id": f"comp-{comp['index']}"})

    def finish_cancel(self) -> None:
        for key, st in self.steps.items():  # idle steps stop now; claimed tasks keep their permit
            if st.state in STEP_OPEN and key not in self.claimed:
                self.set_step(key, S.CANCELLED)
        verdict = ds.finish_cancel(self.inst, in_flight=len(self.claimed))
        if isinstance(verdict, Stop):
            self.stop(verdict.state)
        elif not isinstance(verdict, (Ignore, WaitInFlight)):
            raise InvariantBroken(f"unexpected {verdict}")

    # ------------------------------------------------------------------ events
    def claim(self, key: str) -> None:
        if self.steps[key].state == S.ACTIVE and not self.inst.paused and not self.inst.cancel_requested:
            self.claimed.add(key)

    def task_result(self, key: str, completed: bool, retryable: bool = True, output: object = None) -> None:
        st = self.steps[key]
        if st.kind != StepKind.TASK or st.state != S.ACTIVE:
            return
        if self.inst.cancel_requested and key not in self.claimed:
            return  # an unclaimed task was canceled with the request
        value = (
            ({"ok": True} if output is None else output)
            if completed
            else {"retryable": retryable, "message": "x"}
        )
        task = {"id": f"t-{key}", "activation_id": st.activation_id}
        verdict = dt.task_ended(
            self.inst, st, task, self.specs[key], "completed" if completed else "failed", value
        )
        self.claimed.discard(key)
        self.log.append(f"{key}:{type(verdict).__name__}")
        if isinstance(verdict, Ignore):
            return
        if isinstance(verdict, Collect):
            if verdict.state is not None:
                self.set_step(key, verdict.state)
            if self.inst.state == I.CANCELLING:
                self.finish_cancel()
            return
        if isinstance(verdict, CompleteStep):
            self.set_step(key, S.SUCCEEDED)
            self.outputs[key] = verdict.output
            self.settle()
        elif isinstance(verdict, RetryTask):
            self.steps[key] = replace(st, task_attempts=verdict.attempt)
            if verdict.delay > 0:
                self.set_step(key, S.WAITING)
            self.settle()
        elif isinstance(verdict, FailStep):
            self.set_step(key, S.FAILED)
            if self.inst.cancel_requested:
                self.finish_cancel()
            else:
                self.stop(I.FAILED)

    def wake(self, key: str) -> None:
        """A timer is due, or a TASK step's retry backoff passed."""
        st = self.steps[key]
        if st.kind == StepKind.TIMER:
            if dw.timer_due(st) is None:
                self.set_step(key, S.SUCCEEDED)
                self.outputs[key] = None
                self.settle()
        elif st.kind == StepKind.TASK and dw.task_retry(st, st.task_attempts + 1) is None:
            pass  # the retry path with a delay is covered by task_result (the step stays WAITING)

    def control(self, op: str) -> None:
        verdict = ds.control(self.inst, op, self.inst.control_revision)
        if isinstance(verdict, Refuse):
            return
        rev = self.inst.control_revision + 1
        if isinstance(verdict, Pause):
            self.set_inst(paused=True, control_revision=rev)
        elif isinstance(verdict, Resume):
            self.set_inst(paused=False, control_revision=rev)
            if not self.inst.stop_requested:
                self.settle()
        elif isinstance(verdict, Cancel):
            self.set_inst(
                state=I.CANCELLING,
                cancel_requested=True,
                stop_requested=True,
                stop_kind=self.inst.stop_kind or "CANCEL",
                control_revision=rev,
            )
            self.finish_cancel()

    def compensation_result(self, completed: bool) -> None:
        comp = self.inst.compensation
        if not comp or self.inst.state in TERMINAL:
            return
        verdict = ds.compensation_task_ended(self.inst, f"comp-{comp['index']}", completed)
        if isinstance(verdict, CompensationFailed):
            self.set_inst(state=I.NEEDS_REVIEW, compensation=verdict.comp)
        elif isinstance(verdict, Compensate):
            self.set_inst(compensation=verdict.comp)
            self.issue()
        elif isinstance(verdict, End):
            self.set_inst(compensation=verdict.comp)
            self.end(verdict.state)

    def operator_continue(self) -> None:
        comp = self.inst.compensation
        if self.inst.state != I.NEEDS_REVIEW or not comp or comp.get("state") != "FAILED":
            return
        verdict = ds.compensation_next(self.inst, comp)
        if isinstance(verdict, Compensate):
            self.set_inst(state=I.CANCELLING, compensation=verdict.comp)
            self.issue()
        else:
            self.set_inst(compensation=verdict.comp)
            self.end(verdict.state)

    def deadline(self) -> None:
        if self.inst.state in TERMINAL:
            return
        verdict = ds.deadline_passed(self.inst, due=True)
        if isinstance(verdict, Stop):
            self.stop(verdict.state)

    # ------------------------------------------------------------------ invariants
    def check(self) -> None:
        for key in self.steps:
            open_ = [q for k, q, s in self.activations if k == key and s in STEP_OPEN]
            if len(open_) > 1:
                raise InvariantBroken(f"step {key} has {len(open_)} current activations")
        if len(self.ever_activated) != len(set(self.ever_activated)):
            raise InvariantBroken(f"a step was activated twice: {self.ever_activated}")
        if set(self.ever_activated) & set(self.skipped):
            raise InvariantBroken(
                f"steps both activated and skipped: {set(self.ever_activated) & set(self.skipped)}"
            )
        if len(self.ends) > 1:
            raise InvariantBroken(f"the instance ended {len(self.ends)} times: {self.ends}")
        if self.activated_while_paused:
            raise InvariantBroken(f"a paused instance activated {self.activated_while_paused}")
        compensable = [k for k in self.completed if isinstance(self.specs[k].get("compensation"), dict)]
        expected = list(reversed(compensable))
        if self.compensations_issued != expected[: len(self.compensations_issued)]:
            raise InvariantBroken(
                f"compensations {self.compensations_issued} are not in reverse completion order {expected}"
            )


def new_model(specs: list[dict], input: dict | None = None) -> Model:
    steps = {
        s["key"]: Step(key=s["key"], kind=s["kind"], state=S.BLOCKED, after=tuple(s.get("after", ())))
        for s in specs
    }
    return Model(
        inst=Inst(id="i", state=I.RUNNING), steps=steps, specs={s["key"]: s for s in specs}, input=input or {}
    )
