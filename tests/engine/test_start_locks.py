"""A start locks no row of its definition (migration 0035): the instance names its definition and version
without a foreign key, whose check would lock both rows ``FOR KEY SHARE`` (a WAL record each, and a
MultiXact whenever two starts of one definition overlap); both tables refuse a DELETE instead, since an
instance may name any of their rows."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from app.db import transaction
from app.engine import instances
from app.ids import new_id
from tests.engine.helpers import definition, publish


def test_a_start_leaves_its_definition_rows_unlocked(eng):
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, definition({"key": "a", "kind": "TASK", "queue": "sl.q"}))
    with transaction(eng) as conn:
        started = instances.start_workflow(conn, ns, {"definition_id": def_id, "version": "v1", "input": {}})
        me = conn.execute(text("SELECT CAST(CAST(pg_current_xact_id() AS xid) AS text)")).scalar_one()
        # a row lock is written into the row's xmax; ours would be this transaction's id (or a MultiXact
        # of several lockers' ids)
        lockers = conn.execute(
            text(
                "SELECT CAST(xmax AS text) FROM workflow_definitions WHERE id = :d UNION ALL "
                "SELECT CAST(xmax AS text) FROM workflow_definition_versions WHERE id = :v"
            ),
            {"d": def_id, "v": started["definition_version_id"]},
        ).scalars()
        assert me not in set(lockers)


@pytest.mark.parametrize("table", ["workflow_definitions", "workflow_definition_versions"])
def test_definitions_and_versions_are_never_deleted(eng, table):
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, definition({"key": "a", "kind": "TASK", "queue": "sl.q"}))
    column = "id" if table == "workflow_definitions" else "definition_id"
    with pytest.raises(IntegrityError, match="never deleted"), transaction(eng) as conn:
        conn.execute(text(f"DELETE FROM {table} WHERE {column} = :d"), {"d": def_id})
