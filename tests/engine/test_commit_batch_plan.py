"""The commit statement (``commit_batch.ENGINE_COMMIT_BATCH``) reads only the instances of its batches: each
batch finds its instance by primary key and that instance's newest batch, whatever the tables' statistics
say. Written as a plain join, a plan made on tables never analyzed (a new installation, the bench, a
server without autovacuum) read every instance and looked up each one's newest batch at every commit: at
a thousand instances a commit took 6-8 ms and the sequence index was scanned ~1,100 times per workflow."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from app.engine.commit_batch import ENGINE_COMMIT_BATCH
from app.ids import new_id
from app.sql_text import pyformat
from tests.engine.helpers import definition, publish, start

NS = "ns-" + new_id()[:8]
DOC = definition({"key": "a", "kind": "TASK", "queue": "cbq"})
INSTANCES = 60


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _rows_read(node: dict[str, Any]) -> int:
    return (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * node.get("Actual Loops", 1)


def test_a_commit_reads_only_its_own_instances(eng) -> None:
    def_id = publish(eng, NS, DOC)
    ids = [start(eng, NS, def_id, {})["id"] for _ in range(INSTANCES)]
    batch = {"ord": 1, "id": new_id(), "iid": ids[-1], "n": 1, "events": [["step.active"]], "audit": []}
    params = {"count_namespaces": [], "count_changes": [], "batches": json.dumps([batch])}
    with eng.connect() as conn:
        cur = conn.connection.driver_connection.cursor()
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + pyformat(ENGINE_COMMIT_BATCH.text), params)
        doc = cur.fetchone()[0]
        conn.rollback()  # EXPLAIN ANALYZE wrote the batch: nothing of it stays
    nodes = list(_nodes((doc if isinstance(doc, list) else json.loads(doc))[0]["Plan"]))
    instances = [n for n in nodes if n.get("Relation Name") == "workflow_instances"]
    batches = [n for n in nodes if str(n.get("Relation Name", "")).startswith("workflow_event_batches")]
    assert instances and sum(_rows_read(n) for n in instances) <= 1, instances
    assert sum(n.get("Actual Loops", 1) for n in batches if n["Node Type"] != "ModifyTable") <= 4, batches
