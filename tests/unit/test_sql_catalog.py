"""docs/statements.sql is every named statement of the code, as it runs (issue 49): a statement composed at
import from shared parts is in a file too, written out, under its name. Fails when the file is stale
(`python -m tests.sql_catalog --write` writes it)."""

from __future__ import annotations

import re

from app.sql import QUERIES
from tests import sql_catalog


def test_the_catalogue_is_the_code() -> None:
    text = sql_catalog.render()
    assert sql_catalog.DOC.read_text(encoding="utf-8") == text, (
        "docs/statements.sql is stale: run `python -m tests.sql_catalog --write`"
    )
    ours = sql_catalog.ours(QUERIES.values())
    assert len(ours) > 300
    for q in ours:  # every statement, by name, with the module that defines it
        assert f"-- name: {q.name}\n-- module: {q.module};" in text, q.name


def test_sent_text_is_what_psycopg_sends() -> None:
    q = QUERIES["task_claim"]
    sent = sql_catalog.as_sent(q)
    assert ":ns" not in sent and "%(" not in sent and "$1" in sent
    assert len(set(re.findall(r"\$\d+", sent))) == len(set(re.findall(r"%\((\w+)\)s", q.sql)))


def test_every_statement_fits_psycopgs_query_cache() -> None:
    """psycopg converts a statement's ``%(name)s`` placeholders once and caches the result only for texts
    up to 4,096 bytes (``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``); a longer one is parsed again at
    every execution. The pool's settle-and-claim (every pool pass) is 4,090 bytes: a statement that grows
    past the limit fails here instead of slowing every run of it."""
    try:
        from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH as limit
    except ImportError:  # psycopg moved it: the limit it has had since 3.0
        limit = 4096
    sql_catalog.load_all()
    ours = sql_catalog.ours(QUERIES.values())
    assert "pool_settle_and_claim_by_priority_4" in {q.name for q in ours}
    over = {q.name: len(q.sql.encode()) for q in ours if len(q.sql.encode()) > limit}
    assert over == {}, f"over psycopg's {limit}-byte query cache: {over}"
