"""An id prefix is a range of the primary key (``app.engine.finding.condition_params``): for 32-hex ids,
``lo <= id < hi`` holds exactly when the id starts with the prefix (byte order, the order lowercase hex has
in every collation), also at the edges (a prefix of f's, an id equal to the prefix)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.engine.finding import condition_params

HEX = st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)


@given(HEX, HEX, st.integers(min_value=8, max_value=32), st.booleans())
def test_the_range_is_the_prefix(some_id: str, other: str, n: int, same: bool) -> None:
    prefix = (some_id if same else other)[:n]
    for p in (prefix, prefix.upper()):
        got = condition_params({"id_prefix": p})
        inside = got["idlo"] <= some_id < got["idhi"]
        assert inside == some_id.startswith(prefix.lower()), (p, some_id)
        assert got["idp"] == prefix.lower() + "%"


def test_edges() -> None:
    got = condition_params({"id_prefix": "ffffffff"})
    assert got["idlo"] <= "f" * 32 < got["idhi"]
    assert not (got["idlo"] <= "fffffffe" + "f" * 24 < got["idhi"])
    assert condition_params({})["idlo"] is None and condition_params({})["idhi"] is None
