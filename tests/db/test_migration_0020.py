"""Migration 0020_lazy_steps: BLOCKED steps and the ``$root`` step are not stored. Its downgrade gives a
running instance back its BLOCKED rows (from the pinned document) and its ``$root``; its upgrade deletes
them again, and every reader still lists the same steps."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Engine, text

from app.engine.row_access import read_steps
from app.migrate import alembic_config, upgrade
from tests.db.old_schemas import todays_functions
from tests.engine.helpers import publish, start

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "t", "kind": "TASK", "queue": "mig-q", "timeout_seconds": 60},
        {"key": "wait", "kind": "TIMER", "delay_seconds": 30, "after": ["t"]},
    ],
}


def _rows(eng: Engine, iid: str) -> list[tuple]:
    with eng.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT key, kind, state, after FROM workflow_steps WHERE instance_id = :i ORDER BY key"
                ),
                {"i": iid},
            )
        ]


def _fk(eng: Engine) -> str | None:
    with eng.connect() as conn:
        return conn.execute(
            text(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'workflow_tasks_step_id_fkey'"
            )
        ).scalar_one_or_none()


def _steps(eng: Engine, iid: str) -> list[tuple]:
    with eng.connect() as conn:
        return [(s["key"], s["state"], s["activation_id"]) for s in read_steps(conn, iid)]


def test_downgrade_restores_blocked_and_root_rows_and_upgrade_deletes_them(scratch):
    url, eng = scratch
    upgrade(url, "0035_definitions_unlocked")  # the last revision with the key (0036 drops it)
    todays_functions(eng)  # the rows are made by today's code
    iid = start(eng, "ns-mig", publish(eng, "ns-mig", DOC), {})["id"]
    seen = _steps(eng, iid)
    assert [s[:2] for s in seen] == [("t", "ACTIVE"), ("wait", "BLOCKED")]
    assert _rows(eng, iid) == [("t", "TASK", "ACTIVE", [])]
    assert "DEFERRABLE INITIALLY DEFERRED" in _fk(eng)

    command.downgrade(alembic_config(url), "0019_act_on_step")
    assert _rows(eng, iid) == [
        ("$root", "ROOT", "SUCCEEDED", []),
        ("t", "TASK", "ACTIVE", []),
        ("wait", "TIMER", "BLOCKED", ["t"]),
    ]
    assert "DEFERRABLE" not in _fk(eng)

    upgrade(url)
    assert _rows(eng, iid) == [("t", "TASK", "ACTIVE", [])]
    assert _steps(eng, iid) == seen
    assert _fk(eng) is None  # migration 0036: a task names its step without a key
