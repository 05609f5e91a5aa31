"""Tenant contracts are compiled once per process and version, not at every start."""

from __future__ import annotations

from decimal import Decimal

from app.engine import contracts

SCHEMA = {
    "type": "object",
    "required": ["n"],
    "properties": {
        "n": {"type": "integer", "maximum": 10},
        "code": {"type": "string", "pattern": "^[a-z]+$"},
    },
}


def test_the_same_contract_is_compiled_once_and_judges_every_value_alike():
    contracts._compiled.cache_clear()
    assert contracts.input_errors(SCHEMA, {"n": 1}) == []
    bad = contracts.input_errors(dict(SCHEMA), {"n": 11, "code": "X"})  # an equal schema, another object
    assert [e.field for e in bad] == ["input.code", "input.n"]
    info = contracts._compiled.cache_info()
    assert info.misses == 1 and info.hits == 1


def test_exact_numbers_of_a_stored_contract_survive_the_cache():
    schema = {"type": "number", "multipleOf": Decimal("0.01")}
    assert contracts.input_errors(schema, Decimal("0.07")) == []
    assert [e.field for e in contracts.input_errors(schema, Decimal("0.075"))] == ["input"]


def test_a_contract_that_cannot_be_compiled_is_still_refused_for_every_value():
    broken = {"type": "string", "pattern": "(?<=a)b"}  # look-behind: not linear-time
    for _ in range(2):
        assert [e.field for e in contracts.input_errors(broken, "b")] == ["input"]
