"""Integrations above the workflow engine (ARCHITECTURE.md): schedules (X-SCHED), event subscriptions
and their signed webhook deliveries, automation rules (X-EVENT, X-AUTO). The events themselves are the
engine's outbox (``app.engine.events``); this package fans them out (``event_dispatch``) and delivers them."""
