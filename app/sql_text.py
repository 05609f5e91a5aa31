"""The text of the statements ``app.sql`` sends: psycopg's placeholders for SQLAlchemy's ``:name``
parameters, and the statement compacted (comments out, white space folded). Pure functions of a
statement's text, no database."""

from __future__ import annotations

import re
from functools import lru_cache

# SQLAlchemy's rule for a text statement's bind names (sqlalchemy.sql.elements.TextClause): a ``:name``
# not preceded by a colon, a word character or a backslash, and not followed by a colon (so ``x::text`` is
# a cast); ``\:`` is a literal colon. One difference: the whole name or nothing (SQLAlchemy's pattern
# backtracks, so that ``:ab::int`` binds ``:a`` and leaves ``b::int``, and ``:_0::int`` became
# ``%(_)s0::int``, which psycopg sends as ``$10::int``, parameter ten): such a statement fails here
# instead of binding the wrong name. Write ``CAST(:ab AS int)``.
_BIND = re.compile(r"(?<![:\w\x5c]):(\w+)(?![:\w])")


@lru_cache(maxsize=2048)
def pyformat(sql: str) -> str:
    """``sql`` with psycopg's placeholders: ``:name`` -> ``%(name)s``, a literal ``%`` doubled."""
    return _BIND.sub(r"%(\1)s", sql.replace("%", "%%")).replace("\\:", ":")


def compact_sql(sql: str) -> str:
    """``sql`` without its ``--`` comments and with every run of white space outside string literals
    folded to one space: the same statement, shorter (psycopg caches the conversion of a statement of at
    most 4,096 characters only), and one line in a log or in ``pg_stat_statements``."""
    out: list[str] = []
    i, n, quoted = 0, len(sql), False
    while i < n:
        ch = sql[i]
        if quoted:
            out.append(ch)
            quoted = ch != "'"
        elif ch == "'":
            out.append(ch)
            quoted = True
        elif sql.startswith("--", i):
            i = sql.find("\n", i)
            i = n if i < 0 else i
            continue
        elif ch.isspace():
            if out and out[-1] != " ":
                out.append(" ")
        else:
            out.append(ch)
        i += 1
    return "".join(out).strip()
