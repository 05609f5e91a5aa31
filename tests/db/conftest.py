"""Fixtures for the ledger database tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from app.ledger import handlers, hints
from tests.ledger_helpers import RecordingPublisher, install_recorder, restore_handlers


@pytest.fixture
def recorder() -> Iterator[RecordingPublisher]:
    """A recording wake-hint publisher, removed after the test."""
    rec = install_recorder()
    yield rec
    hints.set_publisher(None)
    hints._suspended_until = 0.0


@pytest.fixture
def handler_registry() -> Iterator[None]:
    """Lets a test register handlers; the registry is restored afterwards."""
    saved = dict(handlers._handlers)
    yield
    restore_handlers(saved)


@pytest.fixture
def scratch() -> Iterator[tuple[str, Engine]]:
    """A database of its own, empty (for tests that migrate it up and down), dropped afterwards."""
    server = make_url(os.environ["LEDGERFLOW_SERVER_DATABASE_URL"])
    name = f"lf_scratch_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = server.set(database=name).render_as_string(hide_password=False)
    eng = create_engine(url)
    try:
        yield url, eng
    finally:
        eng.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
