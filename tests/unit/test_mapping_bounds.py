"""Mappings are bounded while they are built (X-DEF): reference amplification stops at the size
limit after work proportional to the limit, not to the number of copies."""

from __future__ import annotations

import pytest

from app.engine import mapping
from app.engine.documents import MAX_REFERENCES


def _ctx(value: object) -> dict:
    return {"input": value, "business_key": None, "steps": {"a": {"big": value}}}


def test_small_mappings_resolve_as_before():
    ctx = _ctx({"x": [1, 2, {"y": "z"}]})
    assert mapping.resolve({"v": "$.input.x[2].y", "gone": "$.input.nope", "n": None}, ctx) == {
        "v": "z",
        "n": None,
    }
    assert mapping.resolve("$.steps.a.output.big.x[0]", ctx) == 1


def test_reference_amplification_stops_at_the_byte_limit():
    big = {"blob": "x" * 100_000}
    with pytest.raises(mapping.MappingTooLarge) as info:
        mapping.resolve(["$.input", "$.input", "$.input"], _ctx(big))
    assert info.value.error()["code"] == "MAPPED_INPUT_TOO_LARGE"
    assert str(mapping.MAX_MAPPED_BYTES) in info.value.reason and "'$.input'" in info.value.reason
    assert mapping.resolve(["$.input", "$.input"], _ctx(big)) == [big, big]


def test_reference_count_is_capped_for_documents_published_before_the_rule():
    with pytest.raises(mapping.MappingTooLarge, match="references"):
        mapping.resolve(["$.input"] * (MAX_REFERENCES + 1), _ctx(1))


def test_sizing_work_is_bounded_by_the_budget_not_the_value():
    calls = 0

    class Counting(list):
        def __iter__(self):
            for item in super().__iter__():
                nonlocal calls
                calls += 1
                yield item

    huge = Counting(range(2_000_000))
    assert mapping.json_size(huge, 1000) > 1000
    assert calls < 1000  # it stopped once past the budget
    assert mapping.json_size({"a": "bc"}, 10**6) < 20
