"""Workflows written in Python (``ledgerflow.workflow``), with no server: the document they make, the
conditions and references, and the mistakes that fail when the module is imported, naming the step by
its Python name. The document is also checked by the server's own validation (``validate_document``)."""

from __future__ import annotations

import pytest

from app.engine.documents import validate_document
from ledgerflow.workflow import Cond, Workflow, WorkflowError


def _wf() -> Workflow:
    return Workflow("orders", version="v1", deadline_seconds=600, input_schema={"type": "object"})


def test_a_python_workflow_is_the_json_document() -> None:
    wf = _wf()

    @wf.task("q.check", input={"amount": wf.input["amount"]}, retry={"max_attempts": 3, "backoff_seconds": 0})
    def check(task):
        return {"ok": True, "limit": 1000}

    big = wf.input["amount"] > check.output["limit"]
    manual = wf.signal(
        "manual",
        name="approved",
        payload_version="v1",
        schema={"type": "object"},
        correlation=wf.input["order_id"],
        after=[check],
        when=big,
    )

    @wf.task("q.auto", after=[check], when=~big, compensation="q.unauto")
    def auto(task):
        return {"by": "rule"}

    @auto.compensate
    def unauto(task):
        return {}

    pause = wf.timer("cool_off", seconds=5, after=[manual, auto])

    @wf.task("q.ship", after=[pause], input={"lines": wf.input["lines"][0], "key": wf.business_key})
    def ship(task):
        return {"tracking": "T"}

    wf.output({"approval": manual.output, "auto": auto.output["by"], "tracking": ship.output["tracking"]})
    assert wf.document() == {
        "version": "v1",
        "input_schema": {"type": "object"},
        "deadline_seconds": 600,
        "signals": [{"name": "approved", "payload_version": "v1", "schema": {"type": "object"}}],
        "steps": [
            {
                "key": "check",
                "kind": "TASK",
                "queue": "q.check",
                "input": {"amount": "$.input.amount"},
                "retry": {"max_attempts": 3, "backoff_seconds": 0},
            },
            {
                "key": "manual",
                "kind": "SIGNAL",
                "after": ["check"],
                "condition": {">": ["$.input.amount", "$.steps.check.output.limit"]},
                "signal": "approved",
                "payload_version": "v1",
                "correlation": "$.input.order_id",
            },
            {
                "key": "auto",
                "kind": "TASK",
                "after": ["check"],
                "condition": {"not": {">": ["$.input.amount", "$.steps.check.output.limit"]}},
                "queue": "q.auto",
                "compensation": {"queue": "q.unauto"},
            },
            {"key": "cool_off", "kind": "TIMER", "after": ["manual", "auto"], "delay_seconds": 5},
            {
                "key": "ship",
                "kind": "TASK",
                "after": ["cool_off"],
                "queue": "q.ship",
                "input": {"lines": "$.input.lines[0]", "key": "$.business_key"},
            },
        ],
        "output": {
            "approval": "$.steps.manual.output",
            "auto": "$.steps.auto.output.by",
            "tracking": "$.steps.ship.output.tracking",
        },
    }
    validate_document(wf.document())  # the server's validation accepts it
    assert check({"any": "task"}) == {"ok": True, "limit": 1000}  # the step still calls its function

    registered: dict = {}

    class Worker:
        def register(self, queue, fn):
            registered[queue] = fn

    wf.register(Worker())
    assert registered == {"q.check": check.fn, "q.auto": auto.fn, "q.unauto": unauto, "q.ship": ship.fn}


def test_conditions_combine_and_flatten() -> None:
    wf = _wf()
    c = (wf.input["a"] == 1) & (wf.input["b"] != "x") & wf.input["c"].exists()
    assert c.json == {"and": [{"==": ["$.input.a", 1]}, {"!=": ["$.input.b", "x"]}, {"exists": "$.input.c"}]}
    d = wf.input["country"].is_in(["FR", "DE"]) | (wf.input["n"] <= 2.5) | (wf.input["n"] >= wf.input["m"])
    assert d.json == {
        "or": [
            {"in": ["$.input.country", ["FR", "DE"]]},
            {"<=": ["$.input.n", 2.5]},
            {">=": ["$.input.n", "$.input.m"]},
        ]
    }
    assert isinstance(~d, Cond) and (~d).json == {"not": d.json}


def test_python_booleans_of_conditions_and_references_are_refused() -> None:
    wf = _wf()
    with pytest.raises(TypeError, match="combine conditions with &"):
        bool(wf.input["a"] > 1)
    with pytest.raises(TypeError, match="combine conditions with &"):
        (wf.input["a"] > 1) and (wf.input["b"] > 2)
    with pytest.raises(TypeError, match="not a Python value"):
        bool(wf.input["a"])


def test_a_reference_to_a_step_that_is_not_a_dependency_names_the_python_function() -> None:
    wf = _wf()

    @wf.task("q")
    def reserve(task): ...

    @wf.task("q")
    def charge(task): ...

    with pytest.raises(
        WorkflowError, match=r"step ship: input refers to reserve.output, but reserve is not a"
    ):

        @wf.task("q", after=[charge], input={"id": reserve.output["id"]})
        def ship(task): ...

    with pytest.raises(WorkflowError, match=r"step notify: when refers to reserve.output"):

        @wf.task("q", after=[charge], when=reserve.output["ok"] == True)  # noqa: E712
        def notify(task): ...

    @wf.task("q", after=[charge, reserve], input={"id": reserve.output["id"]})  # now a dependency: fine
    def ship_ok(task): ...

    @wf.task("q", after=[ship_ok], when=reserve.output["ok"] == True)  # noqa: E712  (transitive: fine)
    def later(task): ...

    validate_document(wf.document())


def test_import_time_errors_name_the_step() -> None:
    wf, other = _wf(), Workflow("other", version="v1", deadline_seconds=60)

    @other.task("q")
    def foreign(task): ...

    with pytest.raises(WorkflowError, match=r"step mine: after\[0\] is foreign of workflow 'other'"):

        @wf.task("q", after=[foreign])
        def mine(task): ...

    with pytest.raises(
        WorkflowError, match=r"step by_name: after\[0\] is 'a'; a dependency is a step object"
    ):

        @wf.task("q", after=["a"])  # type: ignore[list-item]
        def by_name(task): ...

    @wf.task("q")
    def first(task): ...

    with pytest.raises(
        WorkflowError, match=r"step Other.first \(key 'first'\): workflow 'orders' already has a step"
    ):

        class Other:
            @wf.task("q")
            def first(task): ...

    with pytest.raises(WorkflowError, match=r"input.x: write the reference '\$.input.x' as wf.input"):

        @wf.task("q", input={"x": "$.input.x"})
        def raw(task): ...

    with pytest.raises(WorkflowError, match="use first.output, not the step itself"):

        @wf.task("q", after=[first], input={"x": first})
        def whole(task): ...

    with pytest.raises(WorkflowError, match="a condition is not a value"):

        @wf.task("q", input={"x": wf.input["a"] > 1})
        def cond_value(task): ...


def test_a_cycle_fails_with_the_python_names() -> None:
    wf = _wf()

    @wf.task("q")
    def a(task): ...

    @wf.task("q", after=[a])
    def b(task): ...

    a.after = (b,)  # steps can only name steps declared before them; a cycle needs a mutation
    with pytest.raises(WorkflowError, match=r"dependency cycle: a -> b -> a"):
        wf.document()


def test_a_queue_served_by_two_functions_is_refused_at_register() -> None:
    wf = _wf()

    @wf.task("q")
    def one(task): ...

    @wf.task("q")
    def two(task): ...

    with pytest.raises(WorkflowError, match="queue 'q' is served by another function"):
        wf.register(object())


def test_a_fan_out_step_names_its_element() -> None:
    wf = _wf()

    @wf.task("q.lines")
    def lines(task): ...

    @wf.task(
        "q.reserve",
        after=[lines],
        for_each=lines.output["lines"],
        max_parallel=20,
        tolerance=1,
        input={"sku": wf.item["sku"], "n": wf.index},
    )
    def reserve(task): ...

    assert wf.document()["steps"][1] == {
        "key": "reserve",
        "kind": "TASK",
        "after": ["lines"],
        "queue": "q.reserve",
        "for_each": {"items": "$.steps.lines.output.lines", "max_parallel": 20, "tolerance": 1},
        "input": {"sku": "$.item.sku", "n": "$.index"},
    }
    validate_document(wf.document())
    with pytest.raises(WorkflowError, match="step plain: wf.item / wf.index are for a fan-out step"):

        @wf.task("q", input={"sku": wf.item["sku"]})
        def plain(task): ...

    with pytest.raises(WorkflowError, match="step early: for_each refers to lines.output, but lines is not"):

        @wf.task("q", for_each=lines.output["lines"])
        def early(task): ...


def test_a_child_fan_out_is_its_json_twin_byte_for_byte() -> None:
    import json

    wf = _wf()

    @wf.task("q.lines")
    def lines(task): ...

    pages = wf.child(
        "pages",
        definition_id="0" * 32,
        version="3",
        after=[lines],
        for_each=lines.output["pages"],
        max_items=500,
        max_parallel=5,
        tolerance=2,
        input={"page": wf.item, "n": wf.index, "doc": wf.input["doc"]},
        description="render each page",
    )
    wf.output({"rendered": pages.output})
    twin = {
        "key": "pages",
        "kind": "SUBWORKFLOW",
        "after": ["lines"],
        "description": "render each page",
        "definition_id": "0" * 32,
        "version": "3",
        "for_each": {
            "items": "$.steps.lines.output.pages",
            "max_items": 500,
            "max_parallel": 5,
            "tolerance": 2,
        },
        "input": {"page": "$.item", "n": "$.index", "doc": "$.input.doc"},
    }

    def canonical(doc: object) -> bytes:
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    document = wf.document()
    assert canonical(document["steps"][1]) == canonical(twin)
    assert list(document["steps"][1]) == list(twin)  # and in the order the reference writes it
    validate_document(json.loads(json.dumps(document)))
    with pytest.raises(WorkflowError, match="step plain: wf.item / wf.index are for a fan-out step"):
        wf.child("plain", definition_id="0" * 32, version="3", input={"x": wf.item})
    with pytest.raises(WorkflowError, match="step early: for_each refers to lines.output, but lines is not"):
        wf.child("early", definition_id="0" * 32, version="3", for_each=lines.output["pages"])
