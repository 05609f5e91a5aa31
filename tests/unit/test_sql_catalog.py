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
