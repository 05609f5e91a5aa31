"""Tables of the integrations (X-EVENT, X-AUTO), built by migration ``0008_i10_events``."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from app.metadata import metadata

# A webhook subscription. ``secret`` (and ``previous_secret`` during a rotation's grace period) are
# read only by the delivery handler; no read route or log line selects them.
subscriptions = Table(
    "event_subscriptions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("namespace_id", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("event_types", ARRAY(Text), nullable=False),
    Column("definition_id", Text),
    Column("description", Text, nullable=False, server_default=text("''")),
    Column("secret", Text, nullable=False),
    Column("previous_secret", Text),
    Column("previous_secret_expires_at", DateTime(timezone=True)),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("disabled_reason", Text),
    Column("consecutive_failures", Integer, nullable=False, server_default=text("0")),
    Column("revision", BigInteger, nullable=False, server_default=text("1")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # the credential whose rights the deliveries use (the creator, or whoever enabled / updated it)
    Column("created_by", Text),
)
Index(
    "ix_event_subscriptions_ns", subscriptions.c.namespace_id, subscriptions.c.created_at, subscriptions.c.id
)

# One delivery of one event to one subscription (exactly one per pair; redeliveries reuse the row).
deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", Text, primary_key=True),
    Column("namespace_id", Text, nullable=False),
    Column("subscription_id", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("job_id", BigInteger),
    Column("status", Text, nullable=False, server_default=text("'pending'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("redeliveries", Integer, nullable=False, server_default=text("0")),
    Column("response_code", Integer),
    Column("latency_ms", Integer),
    Column("last_error", Text),
    Column("receipt", JSONB),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("event_id", "subscription_id", name="uq_webhook_deliveries_pair"),
)
Index("ix_webhook_deliveries_sub", deliveries.c.subscription_id, deliveries.c.created_at, deliveries.c.id)

# An automation rule: on an event type (+ definition, + conditions on the body) run one action.
rules = Table(
    "automation_rules",
    metadata,
    Column("id", Text, primary_key=True),
    Column("namespace_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("definition_id", Text),
    Column("conditions", JSONB, nullable=False),
    Column("action", JSONB, nullable=False),
    Column("secret", Text),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("revision", BigInteger, nullable=False, server_default=text("1")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # the credential whose rights the rule acts with (the creator, or whoever enabled it last)
    Column("created_by", Text),
    Column("disabled_reason", Text),  # why the rule disabled itself (rate budget, author revoked)
    # the rate budget: executions in the one-minute window that began at budget_window_at
    Column("budget_window_at", DateTime(timezone=True)),
    Column("budget_used", Integer, nullable=False, server_default=text("0")),
)
Index("ix_automation_rules_ns", rules.c.namespace_id, rules.c.created_at, rules.c.id)

# One execution of one rule for one event (exactly one per pair).
executions = Table(
    "automation_executions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("namespace_id", Text, nullable=False),
    Column("rule_id", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("job_id", BigInteger),
    Column("status", Text, nullable=False, server_default=text("'pending'")),
    Column("result", JSONB),
    Column("last_error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("rule_id", "event_id", name="uq_automation_executions_pair"),
)
Index("ix_automation_executions_rule", executions.c.rule_id, executions.c.created_at, executions.c.id)

Index("ix_webhook_deliveries_created", deliveries.c.created_at)  # retention
Index("ix_automation_executions_created", executions.c.created_at)  # retention
