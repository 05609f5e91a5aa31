"""Fixtures of the integrations tests (``app.integrations``: schedules, subscriptions, webhooks,
automation): the engine tests' clean engine + ledger with the engine's handlers registered."""

from __future__ import annotations

from tests.engine.conftest import eng  # noqa: F401 - fixture
