"""Migration 0021_wait_receipt: a wait records the operation that resolved or expired it. Its downgrade
drops the record and keeps every wait as it is; its upgrade adds the column back, empty."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Engine, text

from app.db import transaction
from app.engine.transitions import wait_moves
from app.migrate import alembic_config, upgrade
from tests.engine.helpers import publish, start

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [{"key": "w", "kind": "TIMER", "delay_seconds": 0}],
}


def _columns(eng: Engine) -> list[str]:
    with eng.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = 'workflow_waits' "
                    "AND column_name LIKE 'resolved%' ORDER BY column_name"
                )
            ).scalars()
        )


def _waits(eng: Engine) -> list[tuple]:
    with eng.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT activation_id, state FROM workflow_waits"))]


def test_downgrade_drops_the_resolving_operation_and_upgrade_adds_it_back_empty(scratch):
    url, eng = scratch
    upgrade(url)
    iid = start(eng, "ns-mig", publish(eng, "ns-mig", DOC), {})["id"]
    with transaction(eng) as conn:
        act = conn.execute(
            text("SELECT activation_id FROM workflow_waits WHERE instance_id = :i"), {"i": iid}
        )
        act_id = act.scalar_one()
        assert wait_moves.try_fire_due(conn, iid, act_id, "op-1") is not None
        assert wait_moves.ended_by(conn, iid, act_id, "op-1") == "w"
    assert _columns(eng) == ["resolved_at", "resolved_by_operation"]
    waits = _waits(eng)
    assert waits == [(act_id, "RESOLVED")]

    command.downgrade(alembic_config(url), "0020_lazy_steps")
    assert _columns(eng) == ["resolved_at"] and _waits(eng) == waits

    upgrade(url)
    assert _columns(eng) == ["resolved_at", "resolved_by_operation"] and _waits(eng) == waits
    with eng.connect() as conn:
        assert conn.execute(text("SELECT resolved_by_operation FROM workflow_waits")).scalar() is None
        assert wait_moves.ended_by(conn, iid, act_id, "op-1") is None
