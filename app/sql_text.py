"""The text of the statements ``app.sql`` sends: psycopg's placeholders for SQLAlchemy's ``:name``
parameters, and the rules by which several statements become one (``combine``: consecutive writes nobody
reads back; ``absorbs``: writes queued before an INSERT of values). Pure functions of the statements' text,
no database."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

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


_WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.I)


def _renamed(sql: str, prefix: str) -> str:
    """``sql`` with each ``:name`` placeholder renamed ``:<prefix>name``."""
    return _BIND.sub(lambda m: f":{prefix}{m.group(1)}", sql)


def _ctes(sqls: tuple[str, ...]) -> str:
    """``sqls`` as the CTEs ``w0``, ``w1``, ..., each one's parameters renamed ``w<i>_<name>``."""
    return ", ".join(f"w{i} AS ({_renamed(sql, f'w{i}_')})" for i, sql in enumerate(sqls))


def _cte_params(statements: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The parameters of ``statements`` as ``_ctes`` renames them."""
    return {f"w{i}_{k}": v for i, (_, args) in enumerate(statements) for k, v in args.items()}


def combine(statements: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Consecutive INSERT / UPDATE / DELETE statements as one statement of data-modifying CTEs (
    a workflow start's inserts are one statement instead of six), their parameters renamed apart; any
    other statement (a SELECT of a setting or a lock) stays as it is, in its place. The writes of one
    combined statement share its snapshot, so none may read what another of them writes: ``defer`` is for
    writes nobody reads back in the transaction, and the rows a foreign key names exist before (or are
    inserted by the same statement: PostgreSQL checks foreign keys at the statement's end)."""
    out: list[tuple[str, dict[str, Any]]] = []
    group: list[tuple[str, dict[str, Any]]] = []

    def close() -> None:
        if len(group) == 1:
            out.append(group[0])
        elif group:
            out.append((_combined(tuple(sql for sql, _ in group)), _cte_params(group)))
        group.clear()

    for sql, args in statements:
        if _is_write(sql):
            group.append((sql, args))
        else:
            close()
            out.append((sql, args))
    close()
    return out


# The statements are the program's (a handful of shapes per transaction kind): the text of a combination
# is made once per process, not renamed by regular expression at every commit.
@lru_cache(maxsize=1024)
def _combined(sqls: tuple[str, ...]) -> str:
    """The one statement of ``combine`` for the writes ``sqls``, in order."""
    return f"WITH {_ctes(sqls)} SELECT 1"


@lru_cache(maxsize=2048)
def _is_write(sql: str) -> bool:
    return _WRITE.match(sql) is not None


_TARGET = re.compile(r"^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(?:ONLY\s+)?([\w.\"]+)", re.I)
_VALUES_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+([\w.\"]+)[^;]*?\bVALUES\b", re.I)
_READS = re.compile(r"\b(SELECT|WITH|FROM|JOIN|TABLE)\b", re.I)


def _table(name: str) -> str:
    """A table's name as written, without its schema and quotes, lower case: ``public."T"`` -> ``t``."""
    return name.rsplit(".", 1)[-1].strip('"').lower()


@lru_cache(maxsize=2048)
def _write_target(sql: str) -> str | None:
    """The table an INSERT / UPDATE / DELETE writes (``_table``), None for anything else."""
    m = _TARGET.match(sql)
    return _table(m.group(1)) if m else None


@lru_cache(maxsize=2048)
def values_insert_target(sql: str) -> str | None:
    """The table of ``sql`` when it is an ``INSERT ... VALUES`` that reads no table: no subquery, no CTE,
    no ``FROM`` / ``JOIN`` anywhere (its ``ON CONFLICT`` and ``RETURNING`` see its own table only), else
    None. Such a statement may share one snapshot with writes of OTHER tables queued before it (``run``):
    it reads nothing they write."""
    m = _VALUES_INSERT.match(sql)
    if m is None or _READS.search(sql, m.end(1)):
        return None
    return _table(m.group(1))


def absorbs(queued: list[tuple[str, dict[str, Any]]], sql: str) -> bool:
    """Whether ``sql`` and the writes ``queued`` before it may be ONE statement (data-modifying CTEs, then
    ``sql``) with the same outcome as sending them one after the other: every queued statement is a write
    of a table other than ``sql``'s, and ``sql`` is an ``INSERT ... VALUES`` (``values_insert_target``),
    which reads no table they write. (What the queued writes read, they read before ``sql``'s row either
    way. Foreign keys are checked at the statement's end, after all of its writes. The functions a VALUES
    list calls are PostgreSQL's own, ``now()``, ``make_interval``, ``pg_backend_pid()``: no function of this
    project reads a table.)"""
    target = values_insert_target(sql)
    if target is None or not queued:
        return False
    for q, _ in queued:
        written = _write_target(q) if _is_write(q) else None
        if written is None or written == target:
            return False
    return True


@lru_cache(maxsize=1024)
def _absorbed(queued: tuple[str, ...], sql: str) -> str:
    """The one statement of ``absorbs``: the queued writes as CTEs ``w0``, ``w1``, ... (parameters renamed
    ``w<i>_<name>``), then ``sql`` (parameters renamed ``m_<name>``), whose rows the statement returns."""
    return f"WITH {_ctes(queued)} {_renamed(sql, 'm_')}"


def absorbed(
    queued: list[tuple[str, dict[str, Any]]], sql: str, params: Mapping[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The statement of ``absorbs`` and its parameters, renamed apart as its text names them."""
    merged = {f"m_{k}": v for k, v in params.items()}
    merged.update(_cte_params(queued))
    return _absorbed(tuple(q for q, _ in queued), sql), merged
