"""Fixtures for the ledger database tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.ledger import handlers, hints
from tests.ledger_helpers import RecordingPublisher, install_recorder


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
    handlers._handlers.clear()
    handlers._handlers.update(saved)
