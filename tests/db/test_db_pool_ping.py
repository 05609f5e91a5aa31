"""Pooled connections are pinged at checkout after an idle spell (``app.db.ping_after_idle``):
a connection whose backend died while it sat idle is replaced before anyone uses it; one that dies while
in steady use fails one statement, and the pool replaces it for the next transaction."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app import db as app_db
from app.db import transaction
from app.sql import run


def _backend_pid(engine) -> int:
    with transaction(engine) as conn:
        return run(conn, "SELECT pg_backend_pid()").scalar_one()


def _terminate(other_engine, pid: int) -> None:
    with other_engine.connect() as other:  # from another pool: the victim stays idle in its own
        other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        other.commit()
    time.sleep(0.2)


@pytest.fixture
def one_connection_engine(engine):
    from sqlalchemy import create_engine

    eng = create_engine(engine.url, pool_size=1, max_overflow=0)
    app_db._ping_on_checkout(eng)  # the listeners every engine of app.db gets
    yield eng
    eng.dispose()


def test_an_idle_connection_is_pinged_and_replaced(engine, one_connection_engine, monkeypatch):
    monkeypatch.setattr(app_db, "_ping_after_idle_seconds", 0.05)
    pid = _backend_pid(one_connection_engine)
    _terminate(engine, pid)  # idle longer than 0.05 s by now
    assert _backend_pid(one_connection_engine) != pid  # no error: the ping found it dead


def test_a_connection_in_steady_use_fails_once_then_the_pool_recovers(
    engine, one_connection_engine, monkeypatch
):
    monkeypatch.setattr(app_db, "_ping_after_idle_seconds", 3600.0)
    pid = _backend_pid(one_connection_engine)
    _terminate(engine, pid)
    with pytest.raises(DBAPIError) as e:
        _backend_pid(one_connection_engine)
    assert e.value.connection_invalidated
    assert _backend_pid(one_connection_engine) != pid
