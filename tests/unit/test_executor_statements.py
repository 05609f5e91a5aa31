"""The pool loop's statements stay within psycopg's statement cache, and compacting SQL
keeps its meaning: string literals and casts untouched, comments gone."""

from hypothesis import given
from hypothesis import strategies as st
from psycopg import _queries

from app.ledger.transitions import executor
from app.sql_text import compact_sql


def test_every_pool_statement_is_short_enough_for_psycopgs_conversion_cache():
    # Above the limit psycopg parses the placeholders again at every execution (~0.2 ms a pass).
    assert executor.PSYCOPG_CACHED_LENGTH == _queries.MAX_CACHED_STATEMENT_LENGTH
    for by_due in (False, True):
        for limit in (0, 1, 4, 64):
            for sql in (
                executor._pg_settle_and_claim_sql(by_due, limit),
                executor._pg_claim_sql(by_due, limit),
            ):
                assert len(sql.encode()) <= executor.PSYCOPG_CACHED_LENGTH, (by_due, limit, len(sql))
                assert "--" not in sql and "\n" not in sql


def test_compact_sql_drops_comments_and_folds_space_outside_literals():
    sql = """
SELECT 'a  -- not a comment', x::int  -- a comment
FROM   t
WHERE  s = 'it''s   kept'   -- another
"""
    assert compact_sql(sql) == "SELECT 'a  -- not a comment', x::int FROM t WHERE s = 'it''s   kept'"


_literal = st.text(alphabet=st.sampled_from("ab -\n'"), max_size=12).map(
    lambda s: "'" + s.replace("'", "''") + "'"
)
_token = st.sampled_from(["SELECT", "x", "::int", "(", ")", ",", "=", "  ", "\n", "\t"])


@given(st.lists(st.one_of(_literal, _token), max_size=30))
def test_compact_sql_never_changes_a_string_literal(parts):
    sql = " ".join(parts)
    compacted = compact_sql(sql)
    literals = [p for p in parts if p.startswith("'")]
    at = 0
    for lit in literals:  # every literal survives verbatim and in order
        found = compacted.find(lit, at)
        assert found >= 0, (lit, compacted)
        at = found + len(lit)
