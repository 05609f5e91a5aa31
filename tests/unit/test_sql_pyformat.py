"""``app.sql_text.pyformat``: a statement's ``:name`` placeholders as psycopg's ``%(name)s``, with SQLAlchemy's
rules for what is a placeholder (not a cast's ``::``, not ``\\:``), a name bound whole or not at all."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from app.sql_text import pyformat


def test_placeholders_casts_literal_colons_and_percent_signs() -> None:
    sql = r"SELECT CAST(:b AS int), :a::text, x::text, :b, '12:30', \:lit, 'x%' LIKE :c"
    assert pyformat(sql) == (
        "SELECT CAST(%(b)s AS int), :a::text, x::text, %(b)s, '12:30', :lit, 'x%%' LIKE %(c)s"
    )


def test_a_name_is_bound_whole_or_not_at_all() -> None:
    """Regression (found by the property below): SQLAlchemy's pattern backtracks, so ``:ab::int`` bound
    ``:a`` (``%(a)sb::int``) and ``:_0::int`` became ``%(_)s0::int``, which psycopg sends as ``$10::int``,
    parameter ten; now neither binds (the statement fails instead of binding the wrong name)."""
    assert pyformat("SELECT :ab::int, :_0::int") == "SELECT :ab::int, :_0::int"


_NAME = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
_TEXT = st.sampled_from([" ", ", ", " = ", " + ", "::int ", " '12:30' ", " x::text ", "0", "1::int "])


@given(st.lists(st.tuples(_TEXT, _NAME), min_size=0, max_size=12))
def test_each_placeholder_stands_for_its_whole_name(parts: list[tuple[str, str]]) -> None:
    """Property: putting each ``%(name)s`` back as ``:name`` gives the statement again (nothing bound by
    a part of its name), and what follows a placeholder is never a word character (psycopg numbers the
    placeholders ``$1``, ``$2``...: a digit after one would change its number)."""
    sql = "SELECT" + "".join(f"{t}:{n}" for t, n in parts) + " "
    converted = pyformat(sql)
    assert re.sub(r"%\((\w+)\)s", r":\1", converted) == sql
    assert not re.search(r"%\(\w+\)s\w", converted)
