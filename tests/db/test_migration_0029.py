"""Migration 0029_time_skip: a workflow that ended while paused (before the end cleared the flag) is not
paused any more after the upgrade; an open paused workflow stays paused."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from app.migrate import alembic_config, upgrade
from tests.engine.helpers import publish, start

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [{"key": "w", "kind": "TIMER", "delay_seconds": 60}],
}


def test_an_ended_workflow_is_not_paused_after_the_upgrade(scratch):
    url, eng = scratch
    # the workflows are started by today's code on today's schema, then the schema is taken back to the
    # revision before this one (the code of that time is gone: it cannot start them there)
    upgrade(url)
    def_id = publish(eng, "ns-mig", DOC)
    ended, open_ = (start(eng, "ns-mig", def_id, {})["id"] for _ in range(2))
    eng.dispose()
    command.downgrade(alembic_config(url), "0026_task_result_key")
    with eng.begin() as conn:  # as a signal that ended a paused workflow left it before the fix
        conn.execute(
            text("UPDATE workflow_instances SET paused = true, paused_at = now() WHERE id = ANY(:ids)"),
            {"ids": [ended, open_]},
        )
        conn.execute(
            text("UPDATE workflow_instances SET state = 'SUCCEEDED', completed_at = now() WHERE id = :i"),
            {"i": ended},
        )
    upgrade(url)
    with eng.connect() as conn:
        rows = dict(conn.execute(text("SELECT id, paused FROM workflow_instances")).all())
    assert rows == {ended: False, open_: True}
