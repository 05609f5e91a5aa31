"""Suite-wide: every statement the domain sends is a named statement of the source (``app.sql.QUERIES``).

A pytest plugin (``tests/conftest.py`` loads it; ``LEDGERFLOW_SQL_NAMES_CHECK=0`` turns it off) that, in
every test process, is told of every statement sent

- through ``app.sql.run`` / ``run_raw`` (``app.sql.observing``): a statement under no name is a plain text;
- on SQLAlchemy's own path (a ``before_cursor_execute`` listener on every engine): ``conn.execute(text(...))``,
  a compiled ``select()``, ``exec_driver_sql``.

A statement is the domain's when the innermost frame of this repository that sent it is not a test's
(``tests/``), a migration's (``migrations/``), a benchmark's or a tool's (the ``ledgerflow`` command line):
those are exempt. SQLAlchemy's own statements (its dialect's first-connect queries, the pool's ping) and
transaction commands (``SET LOCAL``, ``SET TRANSACTION``) and Alembic's (its version table) are not
statements of the domain either.

An unnamed statement of the domain fails the test during (or after) which it was sent, with the place that
sent it. The cost: one call per named statement (the name is looked at, nothing else), a walk up the stack
per unnamed one (only tests' own statements, then).

``pg_stat_statements`` would see what the worker processes that tests start send too, but it must be
loaded at the server's start (``shared_preload_libraries``), which neither the machine's server nor the
embedded one does; those processes run the same modules as the in-process tests.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
_DOMAIN = tuple(str(ROOT / d) + os.sep for d in ("app", "web", "actors"))
_EXEMPT = tuple(str(ROOT / d) + os.sep for d in ("tests", "migrations", "bench", "ledgerflow", "chaos"))
_SQLALCHEMY = os.sep + "sqlalchemy" + os.sep
# SQLAlchemy's own statements: its dialect's (first connect, isolation level), its pool's (the ping)
_SQLALCHEMY_OWN = ("/sqlalchemy/dialects/", "/sqlalchemy/pool/", "/sqlalchemy/engine/default.py")
_ALEMBIC = os.sep + "alembic" + os.sep
_HERE = str(Path(__file__).resolve())
_VENV = str(ROOT / ".venv") + os.sep
_APP_SQL = str(ROOT / "app" / "sql.py")
_COMMANDS = ("SET LOCAL ", "SET TRANSACTION ", "SET SESSION ", "SHOW ", "LISTEN ", "UNLISTEN ", ";")
ENABLED = os.environ.get("LEDGERFLOW_SQL_NAMES_CHECK", "1") != "0"

_found: list[str] = []
_lock = threading.Lock()


def _sender() -> str | None:
    """The repository file (and line) that sent the statement being executed, None when it is
    SQLAlchemy's own or exempt."""
    f: Any = sys._getframe(1)
    own = False
    while f is not None:
        path = f.f_code.co_filename
        if _SQLALCHEMY in path:
            own = own or any(p in path for p in _SQLALCHEMY_OWN)
        elif _ALEMBIC in path:  # Alembic's own statements (its version table), for a migration or a check
            own = True
        elif path not in (_APP_SQL, _HERE) and path.startswith(str(ROOT)) and not path.startswith(_VENV):
            if own or path.startswith(_EXEMPT) or not path.startswith(_DOMAIN):
                return None
            return f"{os.path.relpath(path, ROOT)}:{f.f_lineno} ({f.f_code.co_name})"
        f = f.f_back
    return None


def _record(sql: str) -> None:
    head = sql.lstrip().upper()
    if head.startswith(_COMMANDS) or not head:
        return
    where = _sender()
    if where is None:
        return
    with _lock:
        _found.append(f"{where}: {' '.join(sql.split())[:200]}")


def _observer(name: str | None, sql: str, params: Mapping[str, Any]) -> None:
    if name is None:
        _record(sql)


def _on_cursor(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
    _record(statement)


def pytest_configure(config: pytest.Config) -> None:
    if not ENABLED:
        return
    from sqlalchemy import Engine, event

    from app.sql import OBSERVERS

    OBSERVERS.append(_observer)
    event.listen(Engine, "before_cursor_execute", _on_cursor)


def taken() -> list[str]:
    with _lock:
        out = sorted(set(_found))
        _found.clear()
    return out


@pytest.fixture(autouse=True)
def _every_statement_named() -> Iterator[None]:
    yield
    if not ENABLED:
        return
    unnamed = taken()
    if unnamed:
        pytest.fail(
            "statements of the domain under no name (app.sql.query):\n" + "\n".join(unnamed), pytrace=False
        )
