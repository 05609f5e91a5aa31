"""``app.sql.positional``: a statement's ``:name`` placeholders as PostgreSQL's own ``$n`` (the same name
the same number), converted once per statement, so that psycopg parses nothing at execution; and
``_bound``, the values in the numbers' order."""

from __future__ import annotations

import re

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.sql import _bound, positional, pyformat


def test_names_numbered_in_order_of_first_use_casts_literal_colons_and_percent_signs_kept() -> None:
    sql = r"SELECT CAST(:b AS int), :a::text, x::text, :b, '12:30', \:lit, 'x%' LIKE :c"
    query, names = positional(sql)
    assert query == b"SELECT CAST($1 AS int), :a::text, x::text, $1, '12:30', :lit, 'x%' LIKE $2"
    assert names == ("b", "c")  # ``:a::text`` is no placeholder, as in SQLAlchemy's text() and pyformat
    assert _bound(sql, {"b": 1, "c": "y", "unused": 0}) == (query, [1, "y"])


def test_a_name_is_bound_whole_or_not_at_all() -> None:
    """Regression (found by the property below): SQLAlchemy's pattern backtracks, so ``:ab::int`` bound
    ``:a`` (``$1b::int``) and ``:_0::int`` became ``$10::int``, parameter ten; now neither binds."""
    assert positional("SELECT :ab::int, :_0::int") == (b"SELECT :ab::int, :_0::int", ())


def test_a_missing_value_is_psycopgs_error() -> None:
    with pytest.raises(psycopg.ProgrammingError, match="query parameter missing: b"):
        _bound("SELECT :a, :b", {"a": 1})


_NAME = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
_TEXT = st.sampled_from([" ", ", ", " = ", " + ", "::int ", " '12:30' ", " x::text ", " % "])


@given(st.lists(st.tuples(_TEXT, _NAME), min_size=0, max_size=12))
def test_the_same_placeholders_as_psycopgs_own_conversion(parts: list[tuple[str, str]]) -> None:
    """Property: ``positional`` finds exactly the placeholders ``pyformat`` gives psycopg, each name once
    numbered, and binds each occurrence to its name's value."""
    sql = "SELECT" + "".join(f"{t}:{n}" for t, n in parts) + " "
    query, names = positional(sql)
    occurrences = [n.split(")s", 1)[0] for n in pyformat(sql).split("%(")[1:]]
    assert list(names) == list(dict.fromkeys(occurrences))
    # each $n stands where its name stood: numbering back gives the statement again
    back = re.sub(rb"\$(\d+)", lambda m: b":" + names[int(m.group(1)) - 1].encode(), query)
    assert back == sql.encode()
