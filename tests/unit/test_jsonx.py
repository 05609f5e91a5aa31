"""The strict JSON parser (``app.jsonx.loads``): hostile numbers, nesting and strings are refused with
the field named, before any expensive conversion; arbitrary bytes never escape as another exception."""

from __future__ import annotations

import json
import time
from datetime import UTC
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app import jsonx


def _refused(raw: str | bytes) -> jsonx.BadJSON:
    with pytest.raises(jsonx.BadJSON) as info:
        jsonx.loads(raw)
    return info.value


@pytest.mark.parametrize(
    "literal", ["1e999999999", "-1E+999999999", "1.5e-999999999", "1e4301", "1e" + "9" * 50]
)
def test_huge_exponents_are_refused_quickly_naming_the_field(literal):
    started = time.monotonic()
    err = _refused('{"input": {"amount": ' + literal + "}}")
    assert err.field == "input.amount"
    assert "range" in str(err)
    assert time.monotonic() - started < 0.5


def test_integers_past_the_digit_limit_are_refused_not_a_valueerror():
    err = _refused('{"items": [1, ' + ("9" * 5000) + "]}")
    assert err.field == "items[1]" and "digits" in str(err)
    big = "9" * jsonx.MAX_INT_DIGITS
    assert jsonx.loads('{"n": ' + big + "}")["n"] == int(big)


def test_fraction_with_too_many_digits_is_refused():
    assert _refused('{"x": 0.' + ("1" * 5000) + "}").field == "x"


def test_in_range_numbers_stay_exact():
    doc = jsonx.loads('{"a": 9007199254740993, "b": 0.1000, "c": 1e300, "d": -2.5E-7}')
    assert doc == {
        "a": 9007199254740993,
        "b": Decimal("0.1000"),
        "c": Decimal("1e300"),
        "d": Decimal("-2.5E-7"),
    }


def test_lone_surrogates_are_refused_in_values_and_keys():
    assert _refused('{"name": "a\\ud800b"}').field == "name"
    assert _refused('{"x": [{"\\udfff": 1}]}').field == "x[0]"
    assert jsonx.loads('{"ok": "\\ud83d\\ude00"}') == {"ok": "\U0001f600"}  # a valid pair


def test_nesting_limit_names_the_field():
    ok = "[" * (jsonx.MAX_DEPTH - 1) + "1" + "]" * (jsonx.MAX_DEPTH - 1)
    jsonx.loads('{"a": ' + ok + "}")
    deep = "[" * jsonx.MAX_DEPTH + "]" * jsonx.MAX_DEPTH
    assert _refused('{"a": ' + deep + "}").field.startswith("a[0]")
    very_deep = "[" * 200_000 + "]" * 200_000
    assert "nested" in str(_refused(very_deep))


@settings(max_examples=300, deadline=500)
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_parse_or_raise_badjson(raw):
    try:
        jsonx.loads(raw)
    except (jsonx.BadJSON, jsonx.DuplicateKey):
        pass


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=200, deadline=500)
@given(_json_like)
def test_valid_documents_round_trip_exactly(value):
    text = json.dumps(value)
    try:
        parsed = jsonx.loads(text)
    except jsonx.BadJSON as exc:  # only a lone surrogate from st.text() may be refused
        assert "surrogate" in str(exc)
        return
    assert parsed == value and jsonx.dumps(parsed) == json.dumps(
        value, separators=(",", ":"), ensure_ascii=False
    )


@settings(max_examples=200, deadline=500)
@given(st.text(alphabet="0123456789eE+-.", min_size=1, max_size=40))
def test_number_like_text_never_escapes(literal):
    try:
        jsonx.loads('{"n": ' + literal + "}")
    except (jsonx.BadJSON, jsonx.DuplicateKey):
        pass


@settings(max_examples=300, deadline=500)
@given(st.dictionaries(st.text(max_size=12), st.text(max_size=40), max_size=4))
def test_strings_and_keys_are_written_as_the_json_module_writes_them(value):
    """``jsonx.dumps`` quotes strings with the json module's C quoting function instead of calling
    ``json.dumps`` per string: the text must be the same, lone surrogates included."""
    assert jsonx.dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- dumps: the C encoder's text
_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**60), max_value=10**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.datetimes(timezones=st.just(UTC) | st.none())
    | st.dates()
    | st.uuids()
)
_keys = st.text() | st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)
_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_keys, inner, max_size=4)
    ),
    max_leaves=20,
)


@given(_values)
@settings(max_examples=400, deadline=None)
def test_the_fast_encoder_writes_what_the_exact_one_writes(value):
    """``dumps`` goes through the standard library's C encoder; its text is ``_enc``'s, character for
    character, for every value that has no Decimal (ints of any size, floats, strings with any code
    point, times, dates, UUIDs, tuples, keys of every kind it takes)."""
    assert jsonx.dumps(value) == jsonx._dumps_exact(value)


@given(_values, st.decimals(allow_nan=False, allow_infinity=False))
@settings(max_examples=200, deadline=None)
def test_a_value_with_a_decimal_is_written_digit_for_digit(value, number):
    doc = {"before": value, "n": number, "list": [value, number]}
    text = jsonx.dumps(doc)
    assert text == jsonx._dumps_exact(doc)
    assert f'"n":{number}' in text


def test_values_the_encoder_refuses_are_refused_with_the_exact_encoders_errors():
    from collections import OrderedDict
    from types import MappingProxyType

    assert jsonx.dumps(MappingProxyType({"a": (1, 2)})) == '{"a":[1,2]}'  # a Mapping that is no dict
    assert jsonx.dumps(OrderedDict(b=Decimal("1.50"))) == '{"b":1.50}'
    for bad, error in (
        (float("nan"), ValueError),
        ({"x": [float("inf")]}, ValueError),
        (Decimal("NaN"), ValueError),
        ({1, 2}, TypeError),
        ({"x": object()}, TypeError),
    ):
        with pytest.raises(error):
            jsonx.dumps(bad)


@given(
    st.text(max_size=40)
    | st.sampled_from(['{"a": 1.5}', "[1, 2]", '"\ufeff"', "\ufeff{}", '{"a":1,"a":2}', "NaN", "[-Infinity]"])
)
def test_the_shared_decoders_parse_as_json_loads_with_the_same_options(text):
    """``loads_exact_db`` and ``loads`` keep one decoder each instead of one per call: the value, or the
    error's message, is the one ``json.loads`` with the same options gives (a BOM is refused alike)."""
    try:
        expected: object = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        expected = ("error", exc.msg)
    try:
        got: object = jsonx.loads_exact_db(text)
    except json.JSONDecodeError as exc:
        got = ("error", exc.msg)
    assert repr(got) == repr(expected)  # NaN is not equal to itself: compare the values as written
    if text.startswith("\ufeff"):
        with pytest.raises(jsonx.BadJSON, match="Unexpected UTF-8 BOM"):
            jsonx.loads(text)
