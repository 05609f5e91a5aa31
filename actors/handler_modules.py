"""The modules whose import registers the ledger's built-in handlers, one per job type (a worker
imports them at start, then the LEDGERFLOW_HANDLERS modules, which may replace one for its type).
Importing this module imports none of them (the CLI lists them without loading the engine)."""

from __future__ import annotations

BUILTIN_HANDLER_MODULES: tuple[str, ...] = (
    "app.engine.handlers.timers",
    "app.engine.handlers.task_timeouts",
    "app.engine.handlers.subprocess",
    "app.engine.handlers.compensation",
    "app.engine.handlers.triggers",
    "app.engine.handlers.dispatch",
    "app.integrations.schedule_jobs",
    "app.integrations.webhooks",
    "app.integrations.actions",
)
