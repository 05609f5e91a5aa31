"""Conditions and SKIPPED (issue 44): the condition language (``app.engine.decide.conditions``), its
publish-time check (``app.engine.documents``) and the skip rule of ``decide.progress`` — unit tests and
Hypothesis properties over random DAGs with random conditions (``tests/unit/engine_sim.py``)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.engine.decide import conditions as dc
from app.engine.decide import fanout as df
from app.engine.decide import progress as dp
from app.engine.decide.model import Activate, CompleteStep, FailStep, Finish, Inst, Skip, Snapshot, Step
from app.engine.documents import ancestors, validate_document
from app.engine.states import TERMINAL
from app.errors import InvalidArgument
from tests.unit.engine_sim import new_model
from tests.unit.test_engine_properties import EVENTS

CTX = {
    "input": {
        "amount": Decimal("1500.50"),
        "country": "FR",
        "n": 3,
        "flag": True,
        "none": None,
        "lines": [1, 2],
    },
    "business_key": "order-1",
    "steps": {"reserve": {"id": "r-1", "ok": True}},
}


# --------------------------------------------------------------------------- the language
@pytest.mark.parametrize(
    ("cond", "expected"),
    [
        ({">": ["$.input.amount", 1000]}, True),
        ({"<=": ["$.input.amount", 1000]}, False),
        ({">=": ["$.input.n", 3]}, True),
        ({"<": ["$.input.country", "GB"]}, True),  # strings order
        ({"<": ["$.input.country", 5]}, False),  # mixed types never order
        ({"==": ["$.input.n", Decimal("3.0")]}, True),
        ({"==": ["$.input.flag", 1]}, False),  # true is not 1
        ({"==": ["$.input.flag", True]}, True),
        ({"!=": ["$.input.country", "DE"]}, True),
        ({"in": ["$.input.country", ["FR", "DE"]]}, True),
        ({"in": [2, "$.input.lines"]}, True),
        ({"in": ["$.input.country", "$.input.country"]}, False),  # right side is not a list
        ({"exists": "$.steps.reserve.output.id"}, True),
        ({"exists": "$.input.none"}, False),  # null does not exist
        ({"exists": "$.business_key"}, True),
        ({"and": [{"exists": "$.input.n"}, {"not": {"==": ["$.input.n", 4]}}]}, True),
        ({"or": [{"==": ["$.input.n", 4]}, {"==": ["$.steps.reserve.output.ok", True]}]}, True),
    ],
)
def test_conditions_evaluate(cond: dict, expected: bool) -> None:
    assert dc.evaluate(cond, CTX) is expected


@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">=", "in"])
def test_a_comparison_with_an_absent_value_is_false(op: str) -> None:
    right = [1] if op == "in" else 1
    assert dc.evaluate({op: ["$.input.missing", right]}, CTX) is False
    assert dc.evaluate({op: ["$.steps.skipped.output.v", right]}, CTX) is False  # a skipped step: absent
    assert dc.evaluate({"not": {op: ["$.input.missing", right]}}, CTX) is True


def _publish_errors(condition: object, *, after: list[str] | None = None) -> list[tuple[str, str]]:
    doc = {
        "version": "1",
        "input_schema": {},
        "deadline_seconds": 60,
        "steps": [
            {"key": "a", "kind": "TASK", "queue": "q"},
            {"key": "other", "kind": "TASK", "queue": "q"},
            {"key": "b", "kind": "TASK", "queue": "q", "after": after or ["a"], "condition": condition},
        ],
    }
    try:
        validate_document(doc)
    except InvalidArgument as exc:
        return [(e.field, e.message) for e in exc.field_errors]
    return []


def test_valid_conditions_publish() -> None:
    assert (
        _publish_errors({"and": [{">": ["$.steps.a.output.total", 10]}, {"in": ["$.input.c", ["x", 1]]}]})
        == []
    )
    assert _publish_errors({"not": {"exists": "$.business_key"}}) == []


@pytest.mark.parametrize(
    ("condition", "field", "fragment"),
    [
        ({"~": ["$.input.a", 1]}, "steps[2].condition.~", "unknown operator"),
        ({"and": [{">": [1, 2]}, {"matches": 1}]}, "steps[2].condition.and[1].matches", "unknown operator"),
        ({">": ["$.steps.other.output.v", 1]}, "steps[2].condition.>[0]", "not a (transitive) dependency"),
        ({">": ["$.steps.nope.output.v", 1]}, "steps[2].condition.>[0]", "unknown step"),
        ({"<": ["$.input.a", [1, 2]]}, "steps[2].condition.<[1]", "does not compare a literal list"),
        ({"==": [[1], "$.input.a"]}, "steps[2].condition.==[0]", "only be the right side of 'in'"),
        ({"in": ["$.input.a", "x"]}, "steps[2].condition.in[1]", "a literal list or a reference"),
        ({"exists": 3}, "steps[2].condition.exists", "a reference"),
        ({">": ["$.input.a"]}, "steps[2].condition.>", "two operands"),
        ({">": ["$.input.a", 1], "<": [1, 2]}, "steps[2].condition", "exactly one operator"),
        ({"==": ["$.inputs.a", 1]}, "steps[2].condition.==[0]", "invalid reference"),
        ({"in": ["$.input.a", list(range(101))]}, "steps[2].condition.in[1]", "at most 100"),
    ],
)
def test_bad_conditions_are_refused_with_their_field_path(
    condition: object, field: str, fragment: str
) -> None:
    errors = _publish_errors(condition)
    assert any(f == field and fragment in m for f, m in errors), errors


def test_condition_size_and_depth_are_bounded() -> None:
    deep: dict = {"exists": "$.input.a"}
    for _ in range(dc.MAX_DEPTH):
        deep = {"not": deep}
    assert any("nests at most" in m for _, m in _publish_errors(deep))
    wide = {"and": [{"or": [{"exists": "$.input.a"}] * 16}] * 16}
    assert any(f"at most {dc.MAX_NODES} operators" in m for _, m in _publish_errors(wide))


# --------------------------------------------------------------------------- the skip rule
def _snap(*steps: Step, **inst: object) -> Snapshot:
    return Snapshot(Inst(id="i", state="RUNNING", **inst), steps)  # type: ignore[arg-type]


BIG = {">": ["$.input.amount", 1000]}
SMALL = {"not": BIG}


def test_two_exclusive_branches_join_once_whichever_ran() -> None:
    conds = {"manual": BIG, "auto": SMALL}
    for amount, ran, skipped in ((5000, "manual", "auto"), (10, "auto", "manual")):
        ctx = {"input": {"amount": amount}, "business_key": None, "steps": {}}
        start = Step("start", "TASK", "SUCCEEDED")
        blocked = [Step(k, "TASK", "BLOCKED", ("start",)) for k in ("auto", "manual")]
        join = Step("join", "TASK", "BLOCKED", ("auto", "manual"))
        verdict = dp.progress(_snap(start, *blocked, join), conds, ctx)
        assert isinstance(verdict, Skip) and [k for k, _, _ in verdict.items] == [skipped]
        assert verdict.items[0][1] == dp.CONDITION_FALSE and "$.input.amount > 1000" in verdict.items[0][2]
        states = {ran: "BLOCKED", skipped: "SKIPPED"}
        steps = [start, *(Step(k, "TASK", states[k], ("start",)) for k in ("auto", "manual")), join]
        assert dp.progress(_snap(*steps), conds, ctx) == Activate((ran,))
        steps = [
            start,
            *(Step(k, "TASK", {ran: "SUCCEEDED"}.get(k, "SKIPPED"), ("start",)) for k in ("auto", "manual")),
            join,
        ]
        assert dp.progress(_snap(*steps), conds, ctx) == Activate(("join",))


def test_an_optional_step_is_skipped_and_the_workflow_goes_on() -> None:
    ctx = {"input": {}, "business_key": None, "steps": {}}
    conds = {"notify": {"exists": "$.input.email"}}
    steps = (
        Step("charge", "TASK", "SUCCEEDED"),
        Step("notify", "TASK", "BLOCKED", ("charge",)),
        Step("after_notify", "TASK", "BLOCKED", ("notify",)),
        Step("ship", "TASK", "BLOCKED", ("charge", "notify")),
    )
    assert dp.progress(_snap(*steps), conds, ctx) == Skip(
        (("notify", dp.CONDITION_FALSE, "condition is false: exists $.input.email"),)
    )
    steps = (steps[0], Step("notify", "TASK", "SKIPPED", ("charge",)), *steps[2:])
    verdict = dp.progress(_snap(*steps), conds, ctx)
    assert verdict == Skip(
        (("after_notify", dp.DEPENDENCIES_SKIPPED, "every dependency was skipped: notify"),)
    )
    steps = (*steps[:2], Step("after_notify", "TASK", "SKIPPED", ("notify",)), steps[3])
    assert dp.progress(_snap(*steps), conds, ctx) == Activate(("ship",))
    done = (*steps[:3], Step("ship", "TASK", "SUCCEEDED", ("charge", "notify")))
    assert dp.progress(_snap(*done), conds, ctx) == Finish()


def test_a_paused_instance_decides_no_skip() -> None:
    steps = (Step("a", "TASK", "SUCCEEDED"), Step("b", "TASK", "BLOCKED", ("a",)))
    verdict = dp.progress(_snap(*steps, paused=True), {"b": {"exists": "$.input.x"}}, {"input": {}})
    assert not isinstance(verdict, (Skip, Activate))


def test_without_conditions_the_rule_is_the_old_one() -> None:
    steps = (
        Step("a", "TASK", "SUCCEEDED"),
        Step("b", "TASK", "BLOCKED", ("a",)),
        Step("c", "TASK", "BLOCKED", ("b",)),
    )
    assert dp.progress(_snap(*steps)) == Activate(("b",))


# --------------------------------------------------------------------------- properties
def _operand(draw: st.DrawFn, deps: list[str]) -> object:
    refs = ["$.input.x", "$.input.missing"] + [f"$.steps.{d}.output.v" for d in deps]
    return draw(st.one_of(st.sampled_from(refs), st.integers(0, 3)))


@st.composite
def conditions(draw: st.DrawFn, deps: list[str], depth: int = 0) -> dict:
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "in", "exists", "and", "or", "not"]))
    if op in ("and", "or") and depth < 2:
        return {op: draw(st.lists(conditions(deps, depth + 1), min_size=1, max_size=3))}
    if op == "not" and depth < 2:
        return {"not": draw(conditions(deps, depth + 1))}
    if op == "exists":
        return {
            "exists": draw(
                st.sampled_from(["$.input.x", "$.input.missing"] + [f"$.steps.{d}.output.v" for d in deps])
            )
        }
    if op == "in":
        return {"in": [_operand(draw, deps), draw(st.lists(st.integers(0, 3), max_size=3))]}
    return {
        draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="])): [
            _operand(draw, deps),
            _operand(draw, deps),
        ]
    }


@st.composite
def conditional_workflows(draw: st.DrawFn) -> list[dict]:
    n = draw(st.integers(1, 8))
    specs: list[dict] = []
    for i in range(n):
        kind = draw(st.sampled_from(["TASK", "TASK", "TASK", "TIMER"]))
        after = sorted(draw(st.sets(st.sampled_from([f"s{j}" for j in range(i)]), max_size=3))) if i else []
        spec: dict = {"key": f"s{i}", "kind": kind, "after": after}
        if kind == "TIMER":
            spec["delay_seconds"] = 1
        if kind == "TASK":
            spec["queue"] = "q"
            spec["retry"] = {"max_attempts": draw(st.integers(1, 2)), "backoff_seconds": 0}
            if draw(st.booleans()):
                spec["compensation"] = {"queue": "undo"}
        if draw(st.booleans()):
            anc = sorted(ancestors({s["key"]: s["after"] for s in [*specs, spec]}, spec["key"]))
            spec["condition"] = draw(conditions(anc))
        specs.append(spec)
    return specs


def _document(specs: list[dict]) -> dict:
    return {"version": "1", "input_schema": {}, "deadline_seconds": 60, "steps": [dict(s) for s in specs]}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conditional_workflows(), st.integers(0, 3) | st.none(), st.data())
def test_random_dags_with_conditions_end_with_every_step_decided_once(
    specs: list[dict], x: int | None, data: st.DataObject
) -> None:
    validate_document(_document(specs))  # the strategy only draws publishable documents
    m = new_model(specs, {} if x is None else {"x": x})
    m.settle()
    m.check()
    for _ in range(200):
        if m.inst.state in TERMINAL:
            break
        open_ = [k for k, s in m.steps.items() if s.state in ("ACTIVE", "WAITING")]
        assert open_, f"nothing open and not terminal: {m.steps}"
        key = data.draw(st.sampled_from(open_))
        if m.steps[key].kind == "TIMER":
            m.wake(key)
        elif data.draw(st.integers(0, 9)) == 0:
            m.task_result(key, completed=False, retryable=False)
        else:
            m.task_result(key, completed=True, output={"v": data.draw(st.integers(0, 3))})
        while m.inst.state == "CANCELLING" and m.inst.compensation:  # a failure's compensations
            m.compensation_result(True)
        m.check()
    assert m.inst.state in TERMINAL
    states = {k: s.state for k, s in m.steps.items()}
    if m.inst.state == "SUCCEEDED":
        assert set(states.values()) <= {"SUCCEEDED", "SKIPPED"}, states
        assert sorted(m.ever_activated + list(m.skipped)) == sorted(m.steps)  # each step decided once
    ctx = m.ctx()
    for key, (code, _) in m.skipped.items():  # every skip follows the rule
        after = m.steps[key].after
        if code == dp.DEPENDENCIES_SKIPPED:
            assert after and all(states[d] == "SKIPPED" for d in after)
        else:
            assert not dc.evaluate(m.specs[key]["condition"], ctx)
    for key in m.ever_activated:  # and so does every activation
        after = m.steps[key].after
        assert not (after and all(states[d] == "SKIPPED" for d in after))
        assert "condition" not in m.specs[key] or dc.evaluate(m.specs[key]["condition"], ctx)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conditional_workflows(), st.integers(0, 3), st.lists(EVENTS, max_size=40))
def test_conditions_keep_the_invariants_under_random_events(
    specs: list[dict], x: int, events: list[tuple]
) -> None:
    m = new_model(specs, {"x": x})
    m.settle()
    keys = list(m.steps)
    for ev in events:
        key = keys[ev[1] % len(keys)] if len(ev) > 1 and isinstance(ev[1], int) else None
        if ev[0] == "claim":
            m.claim(key)
        elif ev[0] == "complete":
            m.task_result(key, completed=True, output={"v": ev[1] % 4})
        elif ev[0] == "fail":
            m.task_result(key, completed=False, retryable=ev[2])
        elif ev[0] == "wake":
            m.wake(key)
        elif ev[0] == "control":
            m.control(ev[1])
        elif ev[0] == "compensation":
            m.compensation_result(ev[1])
        elif ev[0] == "operator_continue":
            m.operator_continue()
        else:
            m.deadline()
        m.check()


# --------------------------------------------------------------------------- fan-out decisions
FAN = {"for_each": {"items": "$.input.lines", "max_parallel": 3}, "retry": {"max_attempts": 2}}


def _el(i: int, state: str, attempt: int = 1, error: object = None) -> df.Element:
    return df.Element(i, state, attempt, f"t{i}-{attempt}", error)


def test_fan_out_starts_max_parallel_then_fills_free_places_in_order() -> None:
    assert df.plan(FAN, df.Progress(5), None) == df.StartElements((0, 1, 2))
    assert df.plan(FAN, df.Progress(2), None) == df.StartElements((0, 1))
    # 3 started, 2 running, 1 done: one free place, the next element in order
    assert df.plan(FAN, df.Progress(5, 3, 2, 1), _el(0, "COMPLETED")) == df.StartElements((3,))
    assert df.plan(FAN, df.Progress(2, 2, 0, 2), _el(1, "COMPLETED")) == CompleteStep(None)


def test_fan_out_retries_an_element_then_fails_once_the_others_ended() -> None:
    failing = _el(1, "FAILED", 1, {"message": "x", "retryable": True})
    assert df.plan(FAN, df.Progress(3, 2, 1, 0), failing) == df.RetryElement(1, 2)
    final = _el(1, "FAILED", 2, {"message": "x", "retryable": True})
    # element 1 failed for good, 0 and 2 in flight: nothing new starts; the others end first
    assert df.plan(FAN, df.Progress(5, 3, 2, 0), final) == df.StartElements(())
    verdict = df.plan(FAN, df.Progress(5, 3, 0, 2), _el(2, "COMPLETED"))
    assert verdict == FailStep({"code": df.ELEMENT_FAILED, "failed_elements": 1})
    first = df.first_failure([_el(0, "COMPLETED"), final, _el(2, "COMPLETED"), _el(3, "TIMED_OUT")])
    assert (
        first["element"] == 1
        and first["task_id"] == final.task_id
        and "element 1 failed: x" in first["message"]
    )


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 30), st.integers(1, 6), st.integers(0, 2), st.data())
def test_fan_out_runs_every_element_once_within_max_parallel(n: int, par: int, tolerance: int, data) -> None:
    """Random completions and failures: never more than max_parallel in flight, every element started
    exactly once (plus its retries), and the step ends once, failed iff more than tolerance failed."""
    spec = {
        "for_each": {"items": "$.x", "max_parallel": par, "tolerance": tolerance},
        "retry": {"max_attempts": 2},
    }
    latest: dict[int, df.Element] = {}
    starts: list[int] = []

    def progress() -> df.Progress:
        states = [e.state for e in latest.values()]
        return df.Progress(n, len(latest), states.count("PENDING"), states.count("COMPLETED"))

    def apply(verdict: object) -> object:
        if isinstance(verdict, df.StartElements):
            for i in verdict.indexes:
                assert i not in latest
                starts.append(i)
                latest[i] = _el(i, "PENDING")
        elif isinstance(verdict, df.RetryElement):
            latest[verdict.index] = _el(verdict.index, "PENDING", verdict.attempt)
        return verdict

    end = apply(df.plan(spec, progress(), None))
    for _ in range(200):
        if isinstance(end, (CompleteStep, FailStep)):
            break
        running = [e for e in latest.values() if e.state == "PENDING"]
        assert 0 < len(running) <= par
        e = data.draw(st.sampled_from(sorted(running, key=lambda x: x.index)))
        state = data.draw(st.sampled_from(["COMPLETED", "COMPLETED", "FAILED"]))
        latest[e.index] = df.Element(
            e.index, state, e.attempt, e.task_id, {"retryable": data.draw(st.booleans())}
        )
        end = apply(df.plan(spec, progress(), latest[e.index]))
    assert isinstance(end, (CompleteStep, FailStep))
    assert sorted(starts) == sorted(set(starts))
    failed = [e for e in latest.values() if e.state == "FAILED"]
    assert isinstance(end, FailStep) == (len(failed) > tolerance)
    if isinstance(end, CompleteStep):
        assert sorted(latest) == list(range(n))


def test_an_elements_retry_waits_for_the_backoff_a_plain_task_of_the_step_waits() -> None:
    from app.engine.decide.tasks import retry_delay_seconds

    policy = {"max_attempts": 5, "backoff_seconds": 10, "max_backoff_seconds": 25}
    spec = {**FAN, "retry": policy}
    for attempt, delay in ((2, 10), (3, 20), (4, 25), (5, 25)):
        assert df.retry_delay(spec, df.RetryElement(0, attempt)) == delay
        assert delay == retry_delay_seconds(policy, attempt - 1)
    assert df.retry_delay(FAN, df.RetryElement(3, 2)) == 30  # the default backoff, as a plain task's
    assert (
        df.retry_delay({**FAN, "retry": {"max_attempts": 2, "backoff_seconds": 0}}, df.RetryElement(0, 2))
        == 0
    )


def test_a_child_elements_state_speaks_as_a_tasks() -> None:
    assert [df.child_state(s) for s in ("RUNNING", "WAITING", "NEEDS_REVIEW", "CANCELLING")] == [
        "CLAIMED"
    ] * 4
    assert [df.child_state(s) for s in ("SUCCEEDED", "FAILED", "CANCELLED")] == [
        "COMPLETED",
        "FAILED",
        "CANCELLED",
    ]
    kids = [
        df.Element(i, df.child_state(s), 1, f"c{i}", e)
        for i, s, e in (
            (0, "SUCCEEDED", None),
            (1, "RUNNING", None),
            (2, "CANCELLED", None),
            (3, "FAILED", {"message": "m"}),
        )
    ]
    first = df.first_failure(kids)
    assert (first["element"], first["task_id"], first["message"]) == (2, "c2", "element 2 failed: CANCELLED")


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(1, 6), st.integers(0, 3), st.data())
def test_child_fan_out_starts_each_element_one_child_within_max_parallel(
    n: int, par: int, tolerance: int, data
) -> None:
    """A SUBWORKFLOW fan-out (no retries: a child that ended without success is an element failed for
    good; every decision is made with ``ended=None`` from the activation's child counts): never more than
    max_parallel children unfinished, one child per started element, elements started in order, and the
    step ends once, failed iff more than tolerance children failed; it never ends with a child in flight."""
    spec = {"for_each": {"items": "$.x", "max_parallel": par, "tolerance": tolerance}}
    kids: dict[int, str] = {}  # element -> instance state

    def progress() -> df.Progress:
        states = list(kids.values())
        running = sum(1 for s in states if df.child_state(s) == "CLAIMED")
        return df.Progress(n, len(kids), running, states.count("SUCCEEDED"))

    def apply(verdict: object) -> object:
        if isinstance(verdict, df.StartElements):
            assert list(verdict.indexes) == list(range(len(kids), len(kids) + len(verdict.indexes)))
            for i in verdict.indexes:
                kids[i] = "RUNNING"
        assert not isinstance(verdict, df.RetryElement)
        return verdict

    end = apply(df.plan(spec, progress(), None))
    for _ in range(300):
        if isinstance(end, (CompleteStep, FailStep)):
            break
        running = [i for i, s in kids.items() if s == "RUNNING"]
        assert 0 < len(running) <= par
        i = data.draw(st.sampled_from(sorted(running)))
        kids[i] = data.draw(st.sampled_from(["SUCCEEDED", "SUCCEEDED", "FAILED", "CANCELLED"]))
        end = apply(df.plan(spec, progress(), None))
    assert isinstance(end, (CompleteStep, FailStep))
    assert "RUNNING" not in kids.values()
    failed = [i for i, s in kids.items() if s in ("FAILED", "CANCELLED")]
    assert isinstance(end, FailStep) == (len(failed) > tolerance)
    if isinstance(end, CompleteStep):
        assert sorted(kids) == list(range(n))


def test_fan_out_numbers_written_as_decimals_are_stored_as_integers() -> None:
    doc = {
        "version": "1",
        "input_schema": {},
        "deadline_seconds": 60,
        "steps": [
            {
                "key": "a",
                "kind": "TASK",
                "queue": "q",
                "for_each": {"items": [1, 2, 3], "max_items": Decimal("2.0"), "max_parallel": Decimal("5.0")},
            }
        ],
    }
    with pytest.raises(InvalidArgument) as info:
        validate_document(doc)
    assert (
        "FANOUT_TOO_LARGE" in {e.field: e.message for e in info.value.field_errors}["steps[0].for_each.items"]
    )
    doc["steps"][0]["for_each"]["max_items"] = Decimal("3.0")
    fe = validate_document(doc)[0]["steps"][0]["for_each"]
    assert (fe["max_items"], fe["max_parallel"]) == (3, 5) and type(fe["max_parallel"]) is int
