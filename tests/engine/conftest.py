"""Fixtures of the engine tests: a clean engine + ledger, and the engine's handlers registered."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from tests.conftest import LEDGER_TABLES
from tests.engine.helpers import ENGINE_TABLES
from tests.ledger_helpers import restore_handlers


@pytest.fixture
def eng(engine) -> Iterator:
    import app.engine.handlers.subprocess
    import app.engine.handlers.task_timeouts
    import app.engine.handlers.timers
    from app.ledger import handlers

    saved = dict(handlers._handlers)  # restored after the test
    for mod in (
        app.engine.handlers.timers,
        app.engine.handlers.task_timeouts,
        app.engine.handlers.subprocess,
    ):
        for name in ("delay_wake", "task_timeout", "subprocess_spawn", "subprocess_join"):
            fn = getattr(mod, name, None)
            if fn is not None:
                handlers.register(name, fn, replace=True)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {ENGINE_TABLES}, {LEDGER_TABLES} RESTART IDENTITY CASCADE"))
    yield engine
    restore_handlers(saved)
