"""Tables and columns of control, signals and compensation (SPEC W-CTL, W-SIG, X-AUTO). Migration
``0004`` creates exactly these.

``workflow_tasks.purpose`` tells a step's own tasks (``STEP``) from the compensation tasks that
``compensation_action`` jobs create (``COMPENSATION``); only ``STEP`` tasks hold a cancel open."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from app.engine.models import tasks
from app.metadata import metadata

SIGNAL_STATES = ["PENDING", "CONSUMED", "REJECTED", "EXPIRED"]

if "purpose" not in tasks.c:
    tasks.append_column(Column("purpose", Text, nullable=False, server_default=text("'STEP'")))
    tasks.append_constraint(
        CheckConstraint("purpose IN ('STEP', 'COMPENSATION')", name="ck_workflow_tasks_purpose")
    )

signals = Table(
    "workflow_signals",
    metadata,
    Column("id", Text, primary_key=True),
    Column("namespace_id", Text, nullable=False),
    Column("instance_id", Text, ForeignKey("workflow_instances.id"), nullable=False),
    Column("revision", BigInteger, nullable=False, server_default=text("1")),
    Column("name", Text, nullable=False),
    Column("payload_version", Text, nullable=False),
    Column("target_step_key", Text, nullable=False),
    Column("target_activation_sequence", BigInteger, nullable=False),
    Column("correlation_key", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("actor_id", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("evidence_ref", Text),
    Column("state", Text, nullable=False),
    Column("disposition", Text),
    Column("consumed_wait_id", Text),
    Column("accepted_at", DateTime(timezone=True), nullable=False, server_default=func.clock_timestamp()),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("resolved_at", DateTime(timezone=True)),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint(
        "state IN ('PENDING', 'CONSUMED', 'REJECTED', 'EXPIRED')", name="ck_workflow_signals_state"
    ),
)
Index("ix_workflow_signals_instance", signals.c.instance_id, signals.c.accepted_at, signals.c.id)
Index(
    "ix_workflow_signals_pending",
    signals.c.instance_id,
    signals.c.target_step_key,
    signals.c.target_activation_sequence,
    postgresql_where=text("state = 'PENDING'"),
)
