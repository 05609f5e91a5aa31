"""A typo in a step's kind: the error names the kind that is there and the likely one, and
the steps after it are checked as written (no spurious error about a reference to that step)."""

from __future__ import annotations

import pytest

from app.engine.documents import validate_document
from app.errors import InvalidArgument


def _errors(steps: list[dict]) -> list[tuple[str, str]]:
    doc = {"version": "v1", "input_schema": {}, "deadline_seconds": 60, "steps": steps}
    with pytest.raises(InvalidArgument) as e:
        validate_document(doc)
    return [(f.field, f.message) for f in e.value.field_errors]


def test_a_misspelt_kind_is_named_with_the_likely_one_and_nothing_else():
    steps = [
        {"key": "wait", "kind": "TIMMER", "delay_seconds": 5},
        {"key": "t", "kind": "TASK", "queue": "q", "after": ["wait"], "input": {"x": "$.steps.wait.output"}},
    ]
    assert _errors(steps) == [
        (
            "steps[0].kind",
            "unknown kind 'TIMMER': one of TASK, SIGNAL, TIMER, POLL, SUBWORKFLOW, TRIGGER; "
            "did you mean 'TIMER'?",
        )
    ]


def test_a_missing_kind_is_required_and_an_unlike_one_gets_no_guess():
    assert _errors([{"key": "a", "queue": "q"}]) == [
        ("steps[0].kind", "required: one of TASK, SIGNAL, TIMER, POLL, SUBWORKFLOW, TRIGGER")
    ]
    assert _errors([{"key": "a", "kind": "sleep"}]) == [
        ("steps[0].kind", "unknown kind 'sleep': one of TASK, SIGNAL, TIMER, POLL, SUBWORKFLOW, TRIGGER")
    ]
    # lower case is still a typo of the same kind
    assert "did you mean 'TASK'?" in _errors([{"key": "a", "kind": "task", "queue": "q"}])[0][1]


def test_a_kind_that_is_not_a_string_is_an_error_of_the_field():
    """A kind that is an array or an object (unhashable) is reported like any unknown kind; it used to
    raise TypeError (an internal error) when the step's required fields were looked up by kind."""
    for kind in (["TASK"], {"TASK": 1}):
        errors = _errors([{"key": "a", "kind": kind, "queue": "q"}])
        assert [field for field, _ in errors] == ["steps[0].kind"]
