"""``commit_batch.stored_response`` / ``full_response``: the text kept of a start's response gives the response
back exactly, text for text, from the instance's input, whatever the input (issue 50, migration 0040)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from app import jsonx
from app.engine.commit_batch import INPUT_ON_INSTANCE, full_response, stored_response

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.text(max_size=40),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=8), inner, max_size=6)
    ),
    max_leaves=40,
)


def _response(value: object) -> str:
    instance = {"id": "w" * 32, "state": "RUNNING", "input": value, "business_key": "", "paused": False}
    return jsonx.dumps({"request_id": "req_1", "data": {"instance": instance, "deduplicated": False}})


@given(_json)
def test_the_kept_text_gives_the_response_back_exactly(value: object) -> None:
    response = _response(value)
    # the instance row's input as the engine reads it back (its JSON text parsed exactly)
    instance_input = jsonx.dumps(jsonx.loads_exact_db(jsonx.dumps(value)))
    kept = stored_response(response)
    assert full_response(kept, instance_input) == response
    assert len(kept) <= len(response) or INPUT_ON_INSTANCE not in kept


def test_a_long_input_is_left_out_and_a_short_one_kept() -> None:
    long = {"text": "x" * 500, "n": Decimal("1.10")}
    kept = stored_response(_response(long))
    assert "x" * 500 not in kept and f'"{INPUT_ON_INSTANCE}":true' in kept
    assert stored_response(_response({"i": 18})) == _response({"i": 18})


def test_what_is_no_start_response_is_kept_as_it_is() -> None:
    for text in ('{"data":{"other":1}}', '{"data":[1]}', "[]", '{"request_id":"r"}'):
        assert stored_response(text) == text and full_response(text, "{}") == text
    # a response that already says the marker (never written by a start) is kept whole
    marked = jsonx.dumps({"data": {"instance": {"input": "y" * 300}}, INPUT_ON_INSTANCE: True})
    assert stored_response(marked) == marked
