"""Saga compensation progress (X-AUTO): ``workflow_instances.compensation`` (migration ``0005``).

``{"plan": [{step_key, activation_id, queue}, ...], "index": k, "task_id": ..., "state": RUNNING |
FAILED, "final": CANCELLED | FAILED}`` while an instance that is stopping runs its compensations one
after another; NULL otherwise (and kept, with ``state`` DONE / ABANDONED, once the instance ended)."""

from __future__ import annotations

from sqlalchemy import Column
from sqlalchemy.dialects.postgresql import JSONB

from app.engine.models import instances

if "compensation" not in instances.c:
    instances.append_column(Column("compensation", JSONB))
