"""A task claim reads its queue's open tasks in claim order and stops at the tasks it takes (migration
0022): its work does not grow with the namespace's backlog, and it never scans the instances of every
tenant. The plan is read from PostgreSQL (EXPLAIN ANALYZE on analysed tables), not timed. Fails before:
the claim read every open task of the namespace, sorted them, and checked the instances' holds by a
sequential scan of ``workflow_instances``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import text

from app.db import transaction
from app.engine import row_access, task_protocol
from app.engine.transitions import task_moves
from app.sql_text import pyformat
from tests.engine.helpers import claim_task, complete_task, definition, publish, start, statements_seen

NS = "ns-claim-plan"
BACKLOG = 2000
CLAIMED_AHEAD = 30  # claimed, lease live: the oldest open tasks, which the claim passes over


def _fill(engine) -> None:
    """BACKLOG open tasks of one queue (the oldest CLAIMED_AHEAD claimed, with live leases), each of its
    own running instance; the oldest PENDING one belongs to a paused instance; another namespace holds
    as many. Foreign keys are not checked (``session_replication_role``): only these two tables matter."""
    with transaction(engine) as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        for ns, n in ((NS, BACKLOG), ("ns-other", BACKLOG)):
            conn.execute(
                text(
                    """
INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, version, state,
    revision, paused, control_revision, input, queues, deadline_at, trace_id, created_at, updated_at)
SELECT :ns || '-i' || g, :ns, 'd', 'dv', 'v1', 'RUNNING', 1, :ns = :mine AND g = :paused, 1, '{}', '{}',
    now() + interval '1 hour', 't', now(), now()
FROM generate_series(1, :n) g"""
                ),
                {"ns": ns, "n": n, "mine": NS, "paused": CLAIMED_AHEAD + 1},
            )
            conn.execute(
                text(
                    """
INSERT INTO workflow_tasks (id, namespace_id, instance_id, step_id, step_key, activation_id, queue, state,
    epoch, attempt, deadline_at, created_at, updated_at, purpose, lease_expires_at, instance_created_at)
SELECT :ns || '-t' || lpad(g::text, 5, '0'), :ns, :ns || '-i' || g, 's', 'k', 'a', 'q',
    CASE WHEN g <= :ahead THEN 'CLAIMED' ELSE 'PENDING' END, 1, 1, now() + interval '1 hour',
    now() - interval '1 hour' + g * interval '1 ms', now(), 'STEP',
    CASE WHEN g <= :ahead THEN now() + interval '1 minute' END, now() - interval '2 hours' + g * interval '1 ms'
FROM generate_series(1, :n) g"""
                ),
                {"ns": ns, "n": n, "ahead": CLAIMED_AHEAD},
            )
    with engine.connect() as conn:
        conn.execute(text("ANALYZE workflow_tasks"))
        conn.execute(text("ANALYZE workflow_instances"))


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _plan(engine, statement: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        cur = conn.connection.driver_connection.cursor()
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + pyformat(statement.text), params)
        doc = cur.fetchone()[0]
        conn.rollback()  # EXPLAIN ANALYZE ran the claim: nothing of it stays
    return list(_nodes((doc if isinstance(doc, list) else json.loads(doc))[0]["Plan"]))


def _params(queues: list[str], n: int) -> dict[str, Any]:
    return {
        "ns": NS,
        "queue": queues[0],
        "queues": queues,
        "n": n,
        "lease": 60,
        "key": None,
        "fp": None,
        "worker": None,
    }


def test_a_claim_reads_the_queue_in_order_and_stops_at_what_it_takes(eng) -> None:
    _fill(eng)
    for statement, queues in ((task_moves._CLAIM_ONE_QUEUE, ["q"]), (task_moves._CLAIM_QUEUES, ["p", "q"])):
        nodes = _plan(eng, statement, _params(queues, 4))
        assert not [node for node in nodes if node["Node Type"] == "Seq Scan"], (
            f"a sequential scan in the claim: {[n.get('Relation Name') for n in nodes]}"
        )
        [scan] = [n for n in nodes if n.get("Index Name") == "ix_workflow_tasks_claim"]
        visited = (scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0)) * scan["Actual Loops"]
        # the claimed tasks before the first pending one, the paused instance's task, and the four taken:
        # not the backlog of 2,000
        assert visited <= CLAIMED_AHEAD + 1 + 4 + 2, visited
        assert not [n for n in nodes if n["Node Type"] == "Sort" and n["Actual Rows"] > 8]


def test_a_claim_still_takes_the_oldest_claimable_tasks(eng) -> None:
    """The same answer as before: the oldest PENDING tasks in creation order, passing over live claims and
    the task of a paused instance; with several queues, the oldest of all of them."""
    _fill(eng)
    with transaction(eng) as conn:
        got = [r.id for r in task_moves.claim(conn, NS, ["q"], 3, 60)]
    first = CLAIMED_AHEAD + 2  # the first PENDING task's instance is paused
    assert got == [f"{NS}-t{g:05d}" for g in range(first, first + 3)]
    with transaction(eng) as conn:
        got = [r.id for r in task_moves.claim(conn, NS, ["zz", "q", "q"], 2, 60)]
    assert got == [f"{NS}-t{g:05d}" for g in range(first + 3, first + 5)]


def test_an_ending_instance_finds_its_open_work_by_index(eng) -> None:
    """The end of an instance reads what it left open (``row_access.open_work``) and cancels its waiting waits
    through indexes: no sequential scan of every tenant's waits (migration 0023; fails before, when
    ``workflow_waits`` had no index on its instance)."""
    _fill(eng)
    with transaction(eng) as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            text(
                """
INSERT INTO workflow_waits (id, instance_id, activation_id, kind, state, created_at)
SELECT 'w' || g, :ns || '-i' || g, 'a' || g, 'TIMER', CASE WHEN g % 100 = 0 THEN 'WAITING' ELSE 'RESOLVED' END,
    now()
FROM generate_series(1, :n) g"""
            ),
            {"ns": NS, "n": BACKLOG},
        )
    with eng.connect() as conn:
        conn.execute(text("ANALYZE workflow_waits"))
    cancel = text(
        "UPDATE workflow_waits SET state = 'CANCELLED' WHERE instance_id = :i AND state = 'WAITING'"
    )
    for statement in (text(row_access._OPEN_WORK.text), cancel):
        nodes = _plan(eng, statement, {"i": f"{NS}-i100"})
        assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], [n.get("Relation Name") for n in nodes]


def test_an_instance_that_ends_with_nothing_open_sends_no_cancel(eng) -> None:
    """Nothing open at the end (the common case): one read, no UPDATE of tasks, waits or signals."""
    doc = {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 60,
        "steps": [{"key": "a", "kind": "TASK", "queue": "end.q"}],
    }
    start(eng, NS, publish(eng, NS, doc), {})
    task = claim_task(eng, NS, "end.q")
    with statements_seen(eng) as seen:
        complete_task(eng, NS, task, {})
    cancels = [
        s for s in seen if s.lstrip().startswith("UPDATE workflow_") and ("CANCELLED" in s or "REJECTED" in s)
    ]
    assert cancels == []
    assert [s for s in seen if "EXISTS (SELECT 1 FROM workflow_waits" in s]


CHAIN = definition(
    {"key": "s1", "kind": "TASK", "queue": "cq"},
    {"key": "s2", "kind": "TASK", "queue": "cq", "after": ["s1"]},
)


def _claim(eng, queues: list[str], n: int) -> list[tuple[str, str]]:
    with transaction(eng) as conn:
        return [(t["instance_id"], t["step_key"]) for t in task_protocol.claim(conn, NS, queues, n, 60)]


def test_a_claim_serves_the_workflows_started_first(eng) -> None:
    """A workflow's next step is claimed before the first steps of the workflows started after it, though
    its task was created after theirs (migration 0025). Fails before: the claim took tasks by their own
    creation, so under a backlog every workflow's next step queued behind every younger workflow's first."""
    def_id = publish(eng, NS, CHAIN)
    a, b, c = (start(eng, NS, def_id, {})["id"] for _ in range(3))
    first = claim_task(eng, NS, "cq")
    assert (first["instance_id"], first["step_key"]) == (a, "s1")
    complete_task(eng, NS, first, {})  # a's s2 is created now, after b's and c's s1
    assert _claim(eng, ["cq"], 1) == [(a, "s2")]
    assert _claim(eng, ["zz", "cq"], 2) == [(b, "s1"), (c, "s1")]  # several queues: the same order


def test_the_tasks_of_one_workflow_keep_their_creation_order(eng) -> None:
    """Parallel steps of one instance share its creation time: they are claimed as they were created."""
    doc = definition(*({"key": f"p{i}", "kind": "TASK", "queue": "cq"} for i in range(3)))
    iid = start(eng, NS, publish(eng, NS, doc), {})["id"]
    with eng.connect() as conn:
        made = [
            r.step_key
            for r in conn.execute(
                text("SELECT step_key FROM workflow_tasks WHERE instance_id = :i ORDER BY created_at, id"),
                {"i": iid},
            )
        ]
    assert [k for _, k in _claim(eng, ["cq"], 3)] == made
