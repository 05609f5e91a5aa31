"""``app.sql_text.combine``: consecutive deferred writes become one statement of data-modifying CTEs, their
parameters renamed apart; any other statement keeps its place."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.sql_text import _absorbed, absorbs, combine, values_insert_target


def test_consecutive_writes_are_one_statement_and_a_select_keeps_its_place() -> None:
    got = combine(
        [
            ("INSERT INTO a (x) VALUES (:x) RETURNING y", {"x": 1}),
            ("  update b SET x = :x WHERE k = CAST(:k AS text)", {"x": 2, "k": "q"}),
            ("SELECT pg_advisory_xact_lock(:k)", {"k": 7}),
            ("DELETE FROM c WHERE x = :x", {"x": 3}),
        ]
    )
    assert got == [
        (
            "WITH w0 AS (INSERT INTO a (x) VALUES (:w0_x) RETURNING y), "
            "w1 AS (  update b SET x = :w1_x WHERE k = CAST(:w1_k AS text)) SELECT 1",
            {"w0_x": 1, "w1_x": 2, "w1_k": "q"},
        ),
        ("SELECT pg_advisory_xact_lock(:k)", {"k": 7}),
        ("DELETE FROM c WHERE x = :x", {"x": 3}),
    ]


def test_casts_and_literal_colons_are_not_parameters() -> None:
    ((sql, params),) = combine(
        [
            ("INSERT INTO a VALUES (:x, 'a::b', now()::text)", {"x": 1}),
            ("INSERT INTO b VALUES (:x)", {"x": 2}),
        ]
    )
    assert (
        sql
        == "WITH w0 AS (INSERT INTO a VALUES (:w0_x, 'a::b', now()::text)), w1 AS (INSERT INTO b VALUES (:w1_x)) SELECT 1"
    )
    assert params == {"w0_x": 1, "w1_x": 2}


@given(
    st.lists(st.tuples(st.sampled_from(["INSERT", "UPDATE", "DELETE", "SELECT"]), st.integers()), max_size=12)
)
def test_every_statement_and_parameter_is_kept_once_in_order(stmts: list[tuple[str, int]]) -> None:
    given_ = [(f"{verb} t{i} :p", {"p": v}) for i, (verb, v) in enumerate(stmts)]
    out = combine(given_)
    text = " ".join(sql for sql, _ in out)
    positions = [text.index(f"t{i} ") for i in range(len(given_))]
    assert positions == sorted(positions)  # in order
    assert sorted(v for _, p in out for v in p.values()) == sorted(v for _, v in stmts)
    for sql, params in out:  # every parameter a statement names is given, under that name
        names = {n for n in params}
        assert all(f":{n}" in sql for n in names)


# --------------------------------------------------------------------------- absorbs: the next INSERT too
def test_an_insert_of_values_absorbs_writes_of_other_tables() -> None:
    queued = [("INSERT INTO a (x) VALUES (:x)", {"x": 1}), ("UPDATE b SET y = :y WHERE k = :k", {})]
    step = "INSERT INTO c (k, v) VALUES (:k, now()) ON CONFLICT (k) DO NOTHING RETURNING k"
    assert absorbs(queued, step)
    assert values_insert_target(step) == "c"
    assert _absorbed(tuple(q for q, _ in queued), step) == (
        "WITH w0 AS (INSERT INTO a (x) VALUES (:w0_x)), w1 AS (UPDATE b SET y = :w1_y WHERE k = :w1_k) "
        "INSERT INTO c (k, v) VALUES (:m_k, now()) ON CONFLICT (k) DO NOTHING RETURNING k"
    )


def test_a_statement_that_reads_a_table_or_a_queued_write_of_its_own_table_absorbs_nothing() -> None:
    queued = [("INSERT INTO a (x) VALUES (:x)", {"x": 1})]
    for reads in (
        "INSERT INTO c (k) SELECT k FROM a",
        "INSERT INTO c (k) SELECT x FROM (VALUES (1)) v(x)",
        "INSERT INTO c (k) VALUES ((SELECT max(x) FROM a))",
        "WITH n AS (SELECT 1) INSERT INTO c (k) VALUES (1)",
        "INSERT INTO c (k) VALUES (1) ON CONFLICT (k) DO UPDATE SET k = (SELECT 2)",
        "UPDATE c SET k = 1",
        "SELECT 1",
    ):
        assert not absorbs(queued, reads), reads
    assert not absorbs([("INSERT INTO c (k) VALUES (2)", {})], "INSERT INTO c (k) VALUES (1)")  # same table
    assert not absorbs([('UPDATE public."C" SET k = 2', {})], "INSERT INTO c (k) VALUES (1)")  # so written
    assert not absorbs(
        [("SELECT pg_advisory_xact_lock(1)", {})], "INSERT INTO c (k) VALUES (1)"
    )  # not a write
    assert not absorbs([], "INSERT INTO c (k) VALUES (1)")
    assert values_insert_target("insert into c (from_x) values (1) returning from_x") == "c"  # a column name
