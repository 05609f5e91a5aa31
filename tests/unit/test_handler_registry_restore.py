"""``tests.ledger_helpers.restore_handlers``, which the engine's, the ledger's and the observability tests'
fixtures run after each test: what a handler module registered at its first import during the test stays
registered (it dropped it, so the order of test files mattered: ``tests/engine/test_triggers.py`` before
``tests/docs/test_docs_match_code.py`` left ``external_dispatch`` without a handler); a test's own fake goes,
and a replaced handler comes back."""

from __future__ import annotations

from app.engine.handlers import dispatch, timers
from app.ledger import handlers
from tests.ledger_helpers import restore_handlers


def test_a_registration_made_by_a_first_import_stays_and_a_fake_goes() -> None:
    real = dict(handlers._handlers)
    try:
        handlers._handlers.pop("external_dispatch", None)  # as if its module had not been imported yet
        saved = dict(handlers._handlers)  # what a fixture saves before the test

        handlers.register("external_dispatch", dispatch.external_dispatch, replace=True)  # its first import
        handlers.register("delay_wake", lambda ctx: {"fake": True}, replace=True)  # the test's own fake
        restore_handlers(saved)
        assert handlers.resolve("external_dispatch") is dispatch.external_dispatch
        assert handlers.resolve("delay_wake") is timers.delay_wake

        handlers.register("external_dispatch", lambda ctx: None, replace=True)  # a fake of a type not saved
        restore_handlers(saved)
        assert "external_dispatch" not in handlers.registered()
    finally:
        handlers._handlers.clear()
        handlers._handlers.update(real)
