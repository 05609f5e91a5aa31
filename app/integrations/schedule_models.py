"""Tables of the schedules (X-SCHED); migration ``0008_i11_schedules`` builds them.

``workflow_schedules``: one rule each; ``next_fire_at`` is the first fire time not yet handed to a
``schedule_launch`` job (the scheduler tick moves it forward under ``FOR UPDATE SKIP LOCKED``).
``workflow_schedule_fires``: one row per fire time that was launched or skipped; the unique
(schedule, fire time) pair is the last word on "exactly one instance per fire time".
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from app.metadata import metadata

OVERLAP_POLICIES = ("skip", "allow", "cancel_previous")
FIRE_STATUSES = ("LAUNCHED", "SKIPPED")
FIRE_KINDS = ("SCHEDULED", "MANUAL")

schedules = Table(
    "workflow_schedules",
    metadata,
    Column("id", Text, primary_key=True),
    Column("namespace_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("definition_id", Text, ForeignKey("workflow_definitions.id"), nullable=False),
    Column("version", Text, nullable=False),
    Column("input", JSONB, nullable=False),
    Column("fire_time_field", Text),
    Column("cron", Text),
    Column("timezone", Text, nullable=False, server_default=text("'UTC'")),
    Column("interval_seconds", Integer),
    Column("anchor_at", DateTime(timezone=True), nullable=False),
    Column("overlap", Text, nullable=False, server_default=text("'skip'")),
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("next_fire_at", DateTime(timezone=True), nullable=False),
    Column("revision", BigInteger, nullable=False, server_default=text("1")),
    Column("created_by", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("(cron IS NULL) <> (interval_seconds IS NULL)", name="ck_workflow_schedules_rule"),
    CheckConstraint(
        "overlap IN (" + ", ".join(repr(p) for p in OVERLAP_POLICIES) + ")",
        name="ck_workflow_schedules_overlap",
    ),
    UniqueConstraint("namespace_id", "name", name="uq_workflow_schedules_name"),
)
# the scheduler tick: active schedules by their next fire time
Index("ix_workflow_schedules_due", schedules.c.next_fire_at, postgresql_where=text("NOT paused"))
Index("ix_workflow_schedules_list", schedules.c.namespace_id, schedules.c.created_at, schedules.c.id)

schedule_fires = Table(
    "workflow_schedule_fires",
    metadata,
    Column("id", Text, primary_key=True),
    Column("schedule_id", Text, ForeignKey("workflow_schedules.id", ondelete="CASCADE"), nullable=False),
    Column("namespace_id", Text, nullable=False),
    Column("fire_at", DateTime(timezone=True), nullable=False),
    Column("kind", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("reason", Text),
    Column("skipped_count", Integer, nullable=False, server_default=text("0")),
    Column("skipped_capped", Boolean, nullable=False, server_default=text("false")),
    Column("instance_id", Text),
    Column("job_id", BigInteger),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("status IN ('LAUNCHED', 'SKIPPED')", name="ck_workflow_schedule_fires_status"),
    CheckConstraint("kind IN ('SCHEDULED', 'MANUAL')", name="ck_workflow_schedule_fires_kind"),
    UniqueConstraint("schedule_id", "fire_at", name="uq_workflow_schedule_fires_time"),
)
