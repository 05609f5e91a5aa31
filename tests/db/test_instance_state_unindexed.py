"""No index reads an instance's state (migration 0034), so that its moves between open states are HOT
updates: the new version on the row's own page, no entry in any index. The partial indexes say
"unfinished", "finished" and "failing" through ``completed_at`` (set exactly when the state is terminal:
``ck_workflow_instances_ended``) and ``fail_state`` (the state while FAILED or NEEDS_REVIEW, kept by a
trigger: ``ck_workflow_instances_fail_state``)."""

from __future__ import annotations

import itertools
import uuid

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from app.db import transaction
from app.engine.states import TERMINAL, InstanceState
from app.engine.transitions import instance_moves
from app.migrate import upgrade
from app.sql import run
from tests.engine.helpers import definition, publish

FAILING = {InstanceState.FAILED, InstanceState.NEEDS_REVIEW}
# the columns a move between open states writes (``instance_moves.set_progress``, ``touch``)
OPEN_MOVE_COLUMNS = ("state", "revision", "updated_at")

_INDEXED_COLUMNS = """
SELECT DISTINCT i.relname AS index, a.attname AS column
FROM pg_depend d
JOIN pg_class i ON i.oid = d.objid AND i.relkind = 'i'
JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE d.classid = CAST('pg_class' AS regclass) AND d.refobjid = CAST('workflow_instances' AS regclass)
UNION
SELECT i.relname, a.attname
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = ANY(x.indkey)
WHERE x.indrelid = CAST('workflow_instances' AS regclass)
"""


def test_no_index_of_the_instances_reads_what_a_move_between_open_states_writes(engine):
    """Key columns and the columns of predicates and expressions (``pg_depend``): a change of any of them
    makes an update write an entry into every index."""
    with engine.connect() as conn:
        read = {(r.index, r.column) for r in conn.execute(text(_INDEXED_COLUMNS))}
    assert {c for _, c in read} >= {"namespace_id", "completed_at", "fail_state"}  # the query sees them
    assert [(i, c) for i, c in read if c in OPEN_MOVE_COLUMNS] == []


def _hot(conn: Connection) -> tuple[int, int]:
    """(updates, HOT updates) of ``workflow_instances`` by this transaction so far."""
    row = conn.execute(
        text(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'workflow_instances'"
        )
    ).one()
    return row.n_tup_upd, row.n_tup_hot_upd


def test_moves_between_open_states_are_hot_updates_and_the_end_is_not(scratch):
    """On a database of its own (an empty table: the row's page has room for its new version), the
    named statements of a waiting step's moves: RUNNING -> WAITING -> RUNNING are HOT, the end (which
    sets ``completed_at``, read by the finished index) is not."""
    url, eng = scratch
    upgrade(url)
    with eng.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # no namespace row needed
        conn.execute(
            text("INSERT INTO workflow_definitions (id, namespace_id, name) VALUES ('d', 'ns', 'd')")
        )
        conn.execute(
            text(
                "INSERT INTO workflow_definition_versions (id, definition_id, namespace_id, version, document, "
                "queues) VALUES ('dv', 'd', 'ns', 'v1', '{}', '{}')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, version, "
                "state, revision, input, queues, deadline_at, trace_id) VALUES ('i1', 'ns', 'd', 'dv', 'v1', "
                "'RUNNING', 2, '{}', '{}', now() + interval '1 hour', 't')"
            )
        )
    with eng.begin() as conn:
        base = _hot(conn)
        for state in (InstanceState.WAITING, InstanceState.RUNNING):
            run(
                conn,
                instance_moves._SET_PROGRESS,
                {
                    "inst": "i1",
                    "progress": state,
                    "progress_from": [InstanceState.RUNNING, InstanceState.WAITING],
                },
            ).one()
        upd, hot = _hot(conn)
        assert (upd - base[0], hot - base[1]) == (2, 2)
        run(
            conn,
            instance_moves._END,
            {"id": "i1", "state": "SUCCEEDED", "output": "{}", "error": None, "from": instance_moves.OPEN},
        ).one()
        upd, hot = _hot(conn)
        assert (upd - base[0], hot - base[1]) == (3, 2)
        row = conn.execute(
            text("SELECT state, completed_at IS NOT NULL AS ended FROM workflow_instances")
        ).one()
        assert (row.state, row.ended) == ("SUCCEEDED", True)


def _completed(state: str) -> str:
    return "now()" if state in TERMINAL else "NULL"


def test_fail_state_follows_every_write_of_the_state_and_the_constraints_hold_it(engine):
    """Every (from, to) pair of states, written as any statement would write them: ``fail_state`` is the
    state while FAILED or NEEDS_REVIEW and NULL otherwise, inserted or updated; a hand-made write that
    breaks either rule is refused."""
    ns = "ns-" + uuid.uuid4().hex[:8]
    def_id = publish(engine, ns, definition({"key": "a", "kind": "TASK", "queue": "q"}))
    states = list(InstanceState)
    with transaction(engine) as conn:
        ver = conn.execute(
            text("SELECT id FROM workflow_definition_versions WHERE definition_id = :d"), {"d": def_id}
        ).scalar_one()
        for n, (before, after) in enumerate(itertools.product(states, states)):
            iid = f"{ns}-{n}"
            conn.execute(
                text(
                    "INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, "
                    "version, state, revision, input, queues, deadline_at, trace_id, completed_at) VALUES "
                    f"(:i, :ns, :d, :v, 'v1', :s, 2, '{{}}', '{{}}', now() + interval '1 hour', 't', "
                    f"{_completed(before)})"
                ),
                {"i": iid, "ns": ns, "d": def_id, "v": ver, "s": before},
            )
            inserted = conn.execute(
                text("SELECT fail_state FROM workflow_instances WHERE id = :i"), {"i": iid}
            ).scalar_one()
            assert inserted == (before if before in FAILING else None), before
            conn.execute(
                text(
                    f"UPDATE workflow_instances SET state = :s, completed_at = {_completed(after)} WHERE id = :i"
                ),
                {"i": iid, "s": after},
            )
            updated = conn.execute(
                text("SELECT fail_state FROM workflow_instances WHERE id = :i"), {"i": iid}
            ).scalar_one()
            assert updated == (after if after in FAILING else None), (before, after)
        conn.execute(text("DELETE FROM workflow_instances WHERE namespace_id = :ns"), {"ns": ns})
    for broken in (
        "UPDATE workflow_instances SET fail_state = 'FAILED' WHERE id = :i",  # RUNNING
        "UPDATE workflow_instances SET state = 'SUCCEEDED' WHERE id = :i",  # an end without completed_at
        "UPDATE workflow_instances SET completed_at = now() WHERE id = :i",  # RUNNING with an end
    ):
        with pytest.raises(IntegrityError, match="ck_workflow_instances_"), transaction(engine) as conn:
            conn.execute(
                text(
                    "INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, "
                    "version, state, revision, input, queues, deadline_at, trace_id) VALUES "
                    "(:i, :ns, :d, :v, 'v1', 'RUNNING', 2, '{}', '{}', now() + interval '1 hour', 't')"
                ),
                {"i": f"{ns}-broken", "ns": ns, "d": def_id, "v": ver},
            )
            conn.execute(text(broken), {"i": f"{ns}-broken"})


def test_migration_0034_repairs_the_ends_and_fills_fail_state(scratch):
    """An installation upgraded with rows: an ended instance without ``completed_at`` gets its last
    change as its end, an open one with an end loses it, the failing ones get their ``fail_state``, and
    the three partial indexes say unfinished, finished and failing by ``completed_at`` and ``fail_state``."""
    url, eng = scratch
    upgrade(url, "0033_id_prefix_by_pkey")
    rows = [
        ("failed", "FAILED", "now()"),
        ("review", "NEEDS_REVIEW", "NULL"),
        ("ended-without-end", "SUCCEEDED", "NULL"),
        ("open-with-end", "RUNNING", "now()"),
        ("waiting", "WAITING", "NULL"),
    ]
    with eng.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        for iid, state, completed in rows:
            conn.execute(
                text(
                    "INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, "
                    "version, state, revision, input, queues, deadline_at, trace_id, updated_at, completed_at) "
                    f"VALUES (:i, 'ns', 'd', 'dv', 'v1', :s, 2, '{{}}', '{{}}', now() + interval '1 hour', 't', "
                    f"'2026-01-01T00:00:00Z', {completed})"
                ),
                {"i": iid, "s": state},
            )
    upgrade(url)
    with eng.connect() as conn:
        got = {
            r.id: (r.fail_state, r.completed_at)
            for r in conn.execute(text("SELECT id, fail_state, completed_at::text FROM workflow_instances"))
        }
        assert got["failed"][0] == "FAILED" and got["failed"][1] is not None
        assert got["review"] == ("NEEDS_REVIEW", None)
        assert got["ended-without-end"] == (None, "2026-01-01 00:00:00+00")
        assert got["open-with-end"] == (None, None)
        assert got["waiting"] == (None, None)
        unfinished = conn.execute(
            text(
                "SELECT id FROM workflow_instances WHERE namespace_id = 'ns' AND completed_at IS NULL ORDER BY id"
            )
        ).scalars()
        assert list(unfinished) == ["open-with-end", "review", "waiting"]
        defs = dict(
            conn.execute(
                text(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'workflow_instances' "
                    "AND indexname IN ('ix_workflow_instances_unfinished', 'ix_workflow_instances_finished', "
                    "'ix_workflow_instances_failed')"
                )
            ).all()
        )
        assert defs["ix_workflow_instances_unfinished"].endswith("WHERE (completed_at IS NULL)")
        assert defs["ix_workflow_instances_finished"].endswith("WHERE (completed_at IS NOT NULL)")
        assert defs["ix_workflow_instances_failed"].endswith("WHERE (fail_state IS NOT NULL)")
