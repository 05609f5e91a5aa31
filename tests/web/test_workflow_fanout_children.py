"""Fan-out over child workflows through the HTTP API (issue 44): a SUBWORKFLOW step with ``for_each`` starts
one child instance of a published version per element, at most ``max_parallel`` unfinished at once, and
its output is the children's outputs in element order; a child failing for good fails the step once the
children in flight ended (or within a tolerance); cancel and pause reach the children; an empty array;
more elements than the cap. The parent's spawn and join jobs run inline (``run_jobs``), the children's
tasks are claimed and completed through the API."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from app.auth import Scope
from app.db import get_engine, transaction
from ledgerflow.client import Client, InvalidArgument
from tests.engine.helpers import run_jobs
from tests.web.wf_live import author_token, wf_server  # noqa: F401


@pytest.fixture
def client(wf_server) -> Client:  # noqa: F811
    token = author_token("fanc", Scope.WORKFLOWS_CONTROL, Scope.WORKFLOWS_RECOVERY, Scope.TASKS_WORK)
    return Client(wf_server, token)


CHILD = {
    "version": "1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 600,
    "steps": [
        {"key": "work", "kind": "TASK", "queue": "kid", "input": {"sku": "$.input.sku", "n": "$.input.n"}}
    ],
    "output": "$.steps.work.output",
}


def _parent(child_id: str, **for_each: object) -> dict:
    return {
        "version": "1",
        "input_schema": {"type": "object"},
        "deadline_seconds": 600,
        "steps": [
            {
                "key": "each",
                "kind": "SUBWORKFLOW",
                "definition_id": child_id,
                "version": "1",
                "for_each": {"items": "$.input.lines", **for_each},
                "input": {"sku": "$.item.sku", "n": "$.index"},
            }
        ],
        "output": {"all": "$.steps.each.output"},
    }


def _start(client: Client, lines: object, **for_each: object) -> str:
    child = client.ensure_definition("kid-" + uuid.uuid4().hex[:8], CHILD)
    parent = client.ensure_definition("fanc-" + uuid.uuid4().hex[:8], _parent(child["id"], **for_each))
    return client.start_workflow(parent["id"], "1", {"lines": lines}).instance.id


def _children(wid: str) -> list[tuple[int, str, str]]:
    """(element, id, state) of every child of ``wid``'s fan-out, in element order."""
    with transaction() as conn:
        rows = conn.execute(
            text(
                "SELECT parent_element, id, state FROM workflow_instances WHERE parent_instance_id = :i "
                "ORDER BY parent_element"
            ),
            {"i": wid},
        ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def _unfinished(wid: str) -> int:
    return sum(1 for _, _, s in _children(wid) if s not in ("SUCCEEDED", "FAILED", "CANCELLED"))


def _jobs() -> None:
    run_jobs(get_engine(), limit=500)


def _fan_out(client: Client, wid: str) -> dict:
    return client.request("GET", f"/v1/workflows/{wid}/steps/each")["data"]["fan_out"]


def _kid_tasks(client: Client, wid: str, n: int = 16) -> dict[int, object]:
    """Claim the open tasks of ``wid``'s children (by element index)."""
    kids = {cid for _, cid, _ in _children(wid)}
    got = {}
    for t in client.claim_tasks(["kid"], max_tasks=n):
        assert t.workflow_id in kids
        got[t.input["n"]] = t
    return got


def test_a_child_fan_out_of_50_with_max_parallel_5_outputs_in_element_order(client) -> None:
    lines = [{"sku": f"s{i}"} for i in range(50)]
    wid = _start(client, lines, max_parallel=5)
    _jobs()
    assert _unfinished(wid) == 5 and [e for e, _, _ in _children(wid)] == [0, 1, 2, 3, 4]
    most = 0
    for _ in range(200):
        tasks = _kid_tasks(client, wid)
        if not tasks:
            break
        for n, t in sorted(tasks.items(), reverse=True):  # children end out of element order
            assert t.input == {"sku": f"s{n}", "n": n}
            client.complete_task(t.id, t.epoch, {"sku": t.input["sku"], "x": n * 2})
        _jobs()
        most = max(most, _unfinished(wid))
    assert most <= 5
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "SUCCEEDED"
    assert wf.output == {"all": [{"sku": f"s{i}", "x": i * 2} for i in range(50)]}
    children = _children(wid)
    assert [e for e, _, _ in children] == list(range(50))  # one child per element, no more
    view = _fan_out(client, wid)
    assert (view["total"], view["pending"], view["running"], view["done"], view["failed"]) == (
        50,
        0,
        0,
        50,
        0,
    )
    assert [(e["index"], e["child_workflow_id"]) for e in view["elements"]] == [
        (e, c) for e, c, _ in children
    ]


def test_a_child_failing_for_good_fails_the_step_after_the_others_in_flight(client) -> None:
    wid = _start(client, [{"sku": f"s{i}"} for i in range(5)], max_parallel=3)
    _jobs()
    tasks = _kid_tasks(client, wid)
    assert sorted(tasks) == [0, 1, 2]
    client.fail_task(tasks[1].id, tasks[1].epoch, "no stock for s1", retryable=False)
    _jobs()
    view = _fan_out(client, wid)
    assert (view["pending"], view["running"], view["done"], view["failed"]) == (2, 2, 0, 1)
    assert client.get_workflow(wid).state == "RUNNING"  # the others in flight end first
    assert len(_children(wid)) == 3  # and no element starts any more
    client.complete_task(tasks[0].id, tasks[0].epoch, {"ok": 0})
    _jobs()
    assert client.get_workflow(wid).state == "RUNNING"
    client.complete_task(tasks[2].id, tasks[2].epoch, {"ok": 2})
    _jobs()
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "FAILED" and len(_children(wid)) == 3
    error = client.get_workflow_step(wid, "each").error
    failed_child = _children(wid)[1][1]
    assert error["code"] == "FANOUT_ELEMENT_FAILED" and error["element"] == 1
    assert error["child_workflow_id"] == failed_child and "no stock for s1" in error["message"]


def test_tolerance_lets_a_child_fan_out_succeed_with_null_for_the_failed_element(client) -> None:
    wid = _start(client, [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}], max_parallel=2, tolerance=1)
    _jobs()
    first = _kid_tasks(client, wid)
    client.fail_task(first[1].id, first[1].epoch, "gone", retryable=False)
    client.complete_task(first[0].id, first[0].epoch, {"sku": "a"})
    _jobs()
    rest = _kid_tasks(client, wid)
    assert sorted(rest) == [2]
    client.complete_task(rest[2].id, rest[2].epoch, {"sku": "c"})
    _jobs()
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "SUCCEEDED" and wf.output == {"all": [{"sku": "a"}, None, {"sku": "c"}]}


def test_cancel_reaches_the_children(client) -> None:
    wid = _start(client, [{"sku": str(i)} for i in range(10)], max_parallel=4)
    _jobs()
    assert _unfinished(wid) == 4
    wf = client.get_workflow(wid)
    client.control_workflow(wid, "CANCEL", wf.control_revision, "order withdrawn")
    _jobs()
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "CANCELLED"
    children = _children(wid)
    assert len(children) == 4 and {s for _, _, s in children} == {"CANCELLED"}
    assert client.get_workflow_step(wid, "each").step.state == "CANCELLED"
    assert client.claim_tasks(["kid"], max_tasks=8) == []


def test_pause_holds_new_children_until_resume(client) -> None:
    wid = _start(client, [{"sku": str(i)} for i in range(6)], max_parallel=3)
    _jobs()
    wf = client.get_workflow(wid)
    client.control_workflow(wid, "PAUSE", wf.control_revision, "look first")
    for t in _kid_tasks(client, wid).values():  # the children in flight run on and end
        client.complete_task(t.id, t.epoch, {"n": t.input["n"]})
    _jobs()
    assert len(_children(wid)) == 3 and _unfinished(wid) == 0  # no new child while paused
    view = _fan_out(client, wid)
    assert (view["pending"], view["running"], view["done"]) == (3, 0, 3)
    wf = client.get_workflow(wid)
    client.control_workflow(wid, "RESUME", wf.control_revision, "go on")
    _jobs()
    assert len(_children(wid)) == 6
    for t in _kid_tasks(client, wid).values():
        client.complete_task(t.id, t.epoch, {"n": t.input["n"]})
    _jobs()
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "SUCCEEDED" and wf.output == {"all": [{"n": i} for i in range(6)]}


def test_a_child_fan_out_over_an_empty_array_succeeds_with_an_empty_output(client) -> None:
    wid = _start(client, [])
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "SUCCEEDED" and wf.output == {"all": []} and _children(wid) == []


def test_more_children_than_the_cap(client) -> None:
    child = client.ensure_definition("kid-" + uuid.uuid4().hex[:8], CHILD)
    static = _parent(child["id"], max_items=2)
    static["steps"][0]["for_each"]["items"] = [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}]
    with pytest.raises(InvalidArgument) as info:
        client.ensure_definition("fanc-static-" + uuid.uuid4().hex[:6], static)
    fields = {e["field"]: e["message"] for e in info.value.errors}
    assert "FANOUT_TOO_LARGE" in fields["steps[0].for_each.items"]
    with pytest.raises(InvalidArgument) as info:
        client.ensure_definition("fanc-par-" + uuid.uuid4().hex[:6], _parent(child["id"], max_parallel=0))
    assert "steps[0].for_each.max_parallel" in {e["field"] for e in info.value.errors}
    wid = _start(client, [{"sku": "x"}] * 4, max_items=3)
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "FAILED" and _children(wid) == []
    error = client.get_workflow_step(wid, "each").error
    assert error["code"] == "FANOUT_TOO_LARGE" and (error["count"], error["max_items"]) == (4, 3)


def test_a_child_the_version_refuses_fails_the_step_with_its_element(client) -> None:
    strict = {**CHILD, "input_schema": {"type": "object", "required": ["sku"]}}
    child = client.ensure_definition("kid-" + uuid.uuid4().hex[:8], strict)
    doc = _parent(child["id"], max_parallel=2)
    doc["steps"][0]["input"] = {"sku": "$.item.sku", "n": "$.index"}
    parent = client.ensure_definition("fanc-" + uuid.uuid4().hex[:8], doc)
    wid = client.start_workflow(parent["id"], "1", {"lines": [{"sku": "a"}, {"no": "sku"}]}).instance.id
    _jobs()
    wf = client.wait_for_workflow(wid, timeout=30)
    error = client.get_workflow_step(wid, "each").error
    assert wf.state == "FAILED" and error["code"] == "CHILD_START_REJECTED" and error["element"] == 1


def test_the_parents_deadline_reaches_the_children(client) -> None:
    wid = _start(client, [{"sku": str(i)} for i in range(6)], max_parallel=3)
    _jobs()
    assert _unfinished(wid) == 3
    with transaction() as conn:  # time travel: the parent's deadline passed, its watch is due
        conn.execute(
            text("UPDATE workflow_instances SET deadline_at = now() - interval '1 s' WHERE id = :i"),
            {"i": wid},
        )
        conn.execute(
            text(
                "UPDATE workflow_jobs SET run_at = now() - interval '1 ms' WHERE instance_id = :i "
                "AND type = 'task_timeout' AND status = 'pending'"
            ),
            {"i": wid},
        )
    _jobs()
    wf = client.wait_for_workflow(wid, timeout=30)
    with transaction() as conn:
        code = conn.execute(
            text("SELECT error->>'code' FROM workflow_instances WHERE id = :i"), {"i": wid}
        ).scalar()
    assert wf.state == "FAILED" and code == "DEADLINE_EXCEEDED"
    children = _children(wid)
    assert len(children) == 3 and {s for _, _, s in children} == {"CANCELLED"}


def test_review_holds_new_children_and_a_retried_step_starts_new_ones(client) -> None:
    """An unknown outcome on the fan-out step sends it (and the parent) to review: the children in
    flight run on but no new one starts; RETRY_STEP cancels the old activation's unfinished children and
    the new activation starts its own, once the parent runs again."""
    from tests.web.wf_ops import unknown_outcome_job

    wid = _start(client, [{"sku": str(i)} for i in range(4)], max_parallel=2)
    _jobs()
    old = _children(wid)
    assert len(old) == 2
    unknown_outcome_job(wid, "each")
    wf = client.get_workflow(wid)
    client.control_workflow(wid, "PAUSE", wf.control_revision, "look first")
    assert client.get_workflow(wid).state == "NEEDS_REVIEW"
    wf = client.get_workflow(wid)
    client.control_workflow(wid, "RESUME", wf.control_revision, "still in review")
    tasks = _kid_tasks(client, wid)
    client.complete_task(tasks[0].id, tasks[0].epoch, {"old": 0})  # one old child ends during the review
    _jobs()
    assert len(_children(wid)) == 2  # no new child while in review
    client.recover_workflow_step(wid, "RETRY_STEP", "each", "the call never went out")
    _jobs()
    children = _children(wid)
    states = {cid: s for _, cid, s in children}
    # the old activation's unfinished child got a cancel request (its claimed task keeps its permit)
    assert states[old[0][1]] == "SUCCEEDED" and states[old[1][1]] == "CANCELLING"
    client.complete_task(tasks[1].id, tasks[1].epoch, {"old": 1})
    _jobs()
    assert dict((cid, s) for _, cid, s in _children(wid))[old[1][1]] == "CANCELLED"
    new = [c for c in children if c[1] not in (old[0][1], old[1][1])]
    assert [e for e, _, _ in new] == [0, 1]  # the new activation starts from its first element
    for _ in range(10):
        tasks = _kid_tasks(client, wid)
        if not tasks:
            break
        for n, t in tasks.items():
            client.complete_task(t.id, t.epoch, {"new": n})
        _jobs()
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "SUCCEEDED" and wf.output == {"all": [{"new": i} for i in range(4)]}


def test_an_element_costs_one_child_and_its_join(client) -> None:
    """The parent pays no row per element but the child's join job (as a plain child does; a plain child
    also costs a spawn job of its own): one spawn for the step, no activation, task or wait row."""
    wid = _start(client, [{"sku": str(i)} for i in range(12)], max_parallel=5)
    _jobs()
    for _ in range(20):
        tasks = _kid_tasks(client, wid)
        if not tasks:
            break
        for t in tasks.values():
            client.complete_task(t.id, t.epoch, {})
        _jobs()
    assert client.wait_for_workflow(wid, timeout=30).state == "SUCCEEDED"
    with transaction() as conn:
        jobs = dict(
            conn.execute(
                text(
                    "SELECT type, count(*) FROM workflow_jobs WHERE instance_id = :i AND type::text LIKE 'subprocess%' "
                    "GROUP BY type"
                ),
                {"i": wid},
            ).all()
        )
        counts = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM workflow_instances WHERE parent_instance_id = :i),"
                " (SELECT count(*) FROM workflow_tasks WHERE instance_id = :i),"
                " (SELECT count(*) FROM workflow_waits WHERE instance_id = :i),"
                " (SELECT count(*) FROM workflow_activations WHERE instance_id = :i)"
            ),
            {"i": wid},
        ).one()
    assert jobs == {"subprocess_spawn": 1, "subprocess_join": 12}
    assert tuple(counts) == (12, 0, 0, 0)


def test_a_full_namespace_starts_the_children_it_has_room_for_and_the_rest_later(client, monkeypatch) -> None:
    """The namespace's limit of unfinished workflows applies to children as to any start: a top-up keeps
    the children it could start, and each child's end starts the next ones as room frees."""
    monkeypatch.setenv("LEDGERFLOW_INSTANCE_LIMIT", "3")  # the parent and two children
    wid = _start(client, [{"sku": str(i)} for i in range(5)], max_parallel=4)
    _jobs()
    assert _unfinished(wid) == 2 and client.get_workflow(wid).state in ("RUNNING", "WAITING")
    for _ in range(10):
        tasks = _kid_tasks(client, wid)
        if not tasks:
            break
        assert len(tasks) <= 2
        for n, t in tasks.items():
            client.complete_task(t.id, t.epoch, {"n": n})
        _jobs()
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "SUCCEEDED" and wf.output == {"all": [{"n": i} for i in range(5)]}
    assert len(_children(wid)) == 5
