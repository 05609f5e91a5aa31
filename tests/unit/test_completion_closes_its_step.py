"""A task's completion closes its step in its own statement (``task_moves.complete_closing_step``) when
``decide.tasks.completes_with_its_step`` says the completion completes the step if the step is the task's
current, open, non-POLL activation, the three things the statement's guard checks on the step row. That
split of ``decide.tasks.task_ended``'s rule must be exact: for every instance, task, spec and step, the
statement closes the step exactly when the rule answers ``CompleteStep`` (``driver.task_ended`` refuses the
transaction otherwise, so a difference would refuse completions rather than corrupt a step). No database."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.engine.decide import tasks as decide_tasks
from app.engine.decide.model import CompleteStep, Inst, Step
from app.engine.states import STEP_OPEN, InstanceState, StepKind, StepState

ACT = "act-1"

instances = st.builds(
    Inst,
    id=st.just("i"),
    state=st.sampled_from(list(InstanceState)),
    cancel_requested=st.booleans(),
    stop_requested=st.booleans(),
)
tasks = st.fixed_dictionaries(
    {
        "id": st.just("t"),
        "activation_id": st.just(ACT),
        "purpose": st.sampled_from(["STEP", "COMPENSATION"]),
        "step_key": st.just("s"),
    }
)
specs = st.one_of(
    st.just({}), st.just({"for_each": {"items": "$.input.xs"}}), st.just({"retry": {"max_attempts": 3}})
)
steps = st.one_of(
    st.none(),
    st.builds(
        Step,
        key=st.just("s"),
        kind=st.sampled_from(list(StepKind)),
        state=st.sampled_from(list(StepState)),
        activation_id=st.sampled_from([ACT, "act-0"]),
        task_attempts=st.integers(0, 3),
    ),
)
outputs = st.one_of(
    st.none(), st.dictionaries(st.sampled_from(["ok", "done", "v"]), st.booleans(), max_size=2)
)


def _statement_closes(step: Step | None) -> bool:
    """The step row's part of the rule, as ``task_moves._COMPLETE_CLOSING_STEP``'s guard writes it."""
    return (
        step is not None
        and step.activation_id == ACT
        and step.state in STEP_OPEN
        and step.kind != StepKind.POLL
    )


@given(instances, tasks, specs, steps, outputs)
def test_the_statement_closes_the_step_exactly_when_the_completion_completes_it(
    inst, task, spec, step, output
):
    verdict = decide_tasks.task_ended(inst, step, task, spec, decide_tasks.COMPLETED, output)
    asked = decide_tasks.completes_with_its_step(inst, task, spec)
    if asked:  # the completion goes through complete_closing_step: the statement decides with the rule
        assert _statement_closes(step) == isinstance(verdict, CompleteStep)
    # driver.task_ended routes compensation and fan-out tasks elsewhere before this rule; for the others the
    # rule completes no step the statement was not asked to close
    if task["purpose"] != "COMPENSATION" and "for_each" not in spec and isinstance(verdict, CompleteStep):
        assert asked


def test_examples():
    running = Inst(id="i", state=InstanceState.RUNNING)
    task = {"id": "t", "activation_id": ACT, "purpose": "STEP", "step_key": "s"}
    assert decide_tasks.completes_with_its_step(running, task, {})
    assert not decide_tasks.completes_with_its_step(running, {**task, "purpose": "COMPENSATION"}, {})
    assert not decide_tasks.completes_with_its_step(running, task, {"for_each": {}})
    assert not decide_tasks.completes_with_its_step(Inst(id="i", state=InstanceState.SUCCEEDED), task, {})
    assert not decide_tasks.completes_with_its_step(
        Inst(id="i", state=InstanceState.CANCELLING, cancel_requested=True), task, {}
    )
