"""Integrations on top of the engine (SPEC X-EVENT, X-AUTO): event subscriptions and their signed
webhook deliveries, automation rules. The events themselves are the engine's outbox
(``app.engine.events``); this package fans them out (``event_dispatch``) and delivers them."""
