"""Fan-out over data through the HTTP API on a live server (issue 44): a TASK step with ``for_each`` runs
one task per element, at most ``max_parallel`` in flight, output in element order; an element failing
for good fails the step once the elements in flight ended; per-element retries; cancel and pause
during a fan-out; an empty array; more elements than the cap (400 at publish when static, a step
failure with a code at run time); the step view's progress."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from app.auth import Scope
from app.db import transaction
from ledgerflow.client import Client, InvalidArgument
from tests.web.wf_live import author_token, wf_server  # noqa: F401


@pytest.fixture
def client(wf_server) -> Client:  # noqa: F811
    token = author_token("fan", Scope.WORKFLOWS_CONTROL, Scope.TASKS_WORK)
    return Client(wf_server, token)


def _doc(**for_each: object) -> dict:
    return {
        "version": "1",
        "input_schema": {"type": "object"},
        "deadline_seconds": 600,
        "steps": [
            {
                "key": "reserve",
                "kind": "TASK",
                "queue": "fan",
                "for_each": {"items": "$.input.lines", **for_each},
                "input": {"sku": "$.item.sku", "n": "$.index", "order": "$.input.order"},
                "retry": {"max_attempts": 2, "backoff_seconds": 0},
            },
            {
                "key": "total",
                "kind": "TASK",
                "queue": "after",
                "after": ["reserve"],
                "input": {"r": "$.steps.reserve.output"},
            },
        ],
        "output": {"reserved": "$.steps.reserve.output"},
    }


def _start(client: Client, doc: dict, lines: object) -> str:
    definition = client.ensure_definition("fan-" + uuid.uuid4().hex[:8], doc)
    return client.start_workflow(definition["id"], "1", {"lines": lines, "order": "O-1"}).instance.id


def _open_element_tasks(wid: str) -> int:
    with transaction() as conn:
        return conn.execute(
            text(
                "SELECT count(*) FROM workflow_tasks WHERE instance_id = :i AND element IS NOT NULL "
                "AND state IN ('PENDING', 'CLAIMED')"
            ),
            {"i": wid},
        ).scalar_one()


def _fan_out(client: Client, wid: str) -> dict:
    return client.request("GET", f"/v1/workflows/{wid}/steps/reserve")["data"]["fan_out"]


def _finish_after(client: Client, wid: str) -> None:
    for task in client.claim_tasks(["after"], max_tasks=1):
        client.complete_task(task.id, task.epoch, {"ok": True})


def test_a_fan_out_of_500_with_max_parallel_20_outputs_in_element_order(client) -> None:
    lines = [{"sku": f"s{i}"} for i in range(500)]
    wid = _start(client, _doc(max_parallel=20), lines)
    assert _open_element_tasks(wid) == 20
    done: list = []
    claimed = client.claim_tasks(["fan"], max_tasks=16)
    seen_parallel = 0
    while claimed:
        for t in claimed:
            assert t.input == {"sku": lines[t.input["n"]]["sku"], "n": t.input["n"], "order": "O-1"}
        seen_parallel = max(seen_parallel, _open_element_tasks(wid))
        completions = [
            (t.id, t.epoch, {"sku": t.input["sku"], "x": t.input["n"] * 2}) for t in reversed(claimed)
        ]
        results, claimed = client.complete_and_claim(completions, ["fan"], max_tasks=16)
        done += [r for r in results]
    assert seen_parallel <= 20 and len(done) == 500
    view = _fan_out(client, wid)
    assert (view["total"], view["pending"], view["running"], view["done"], view["failed"]) == (
        500,
        0,
        0,
        500,
        0,
    )
    assert [e["index"] for e in view["elements"]] == list(range(500)) and all(
        e["task_id"] for e in view["elements"]
    )
    _finish_after(client, wid)
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "SUCCEEDED"
    assert wf.output["reserved"] == [{"sku": f"s{i}", "x": i * 2} for i in range(500)]


def test_an_element_failing_for_good_fails_the_step_after_the_others_in_flight(client) -> None:
    wid = _start(client, _doc(max_parallel=3), [{"sku": f"s{i}"} for i in range(5)])
    tasks = {t.input["n"]: t for t in client.claim_tasks(["fan"], max_tasks=3)}
    assert sorted(tasks) == [0, 1, 2]
    client.fail_task(tasks[1].id, tasks[1].epoch, "no stock for s1", retryable=False)
    view = _fan_out(client, wid)
    assert (view["pending"], view["running"], view["done"], view["failed"]) == (2, 2, 0, 1)
    assert client.get_workflow(wid).state == "RUNNING"  # the others in flight end first
    assert _open_element_tasks(wid) == 2  # and no element starts any more
    client.complete_task(tasks[0].id, tasks[0].epoch, {"ok": 0})
    assert client.get_workflow(wid).state == "RUNNING"
    client.complete_task(tasks[2].id, tasks[2].epoch, {"ok": 2})
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "FAILED"
    error = client.get_workflow_step(wid, "reserve").error
    assert error["code"] == "FANOUT_ELEMENT_FAILED" and error["element"] == 1
    assert "no stock for s1" in error["message"] and error["task_id"] == tasks[1].id


def test_an_element_is_retried_by_the_steps_policy_and_tolerance_lets_the_step_succeed(client) -> None:
    wid = _start(client, _doc(max_parallel=2, tolerance=1), [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}])
    first = {t.input["n"]: t for t in client.claim_tasks(["fan"], max_tasks=2)}
    client.fail_task(first[0].id, first[0].epoch, "flaky", retryable=True)  # attempt 2 of element 0
    client.fail_task(first[1].id, first[1].epoch, "gone", retryable=False)  # element 1: failed, tolerated
    rest = {t.input["n"]: t for t in client.claim_tasks(["fan"], max_tasks=4)}
    assert sorted(rest) == [0, 2] and rest[0].attempt == 2
    for t in rest.values():
        client.complete_task(t.id, t.epoch, {"sku": t.input["sku"]})
    _finish_after(client, wid)
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "SUCCEEDED" and wf.output["reserved"] == [{"sku": "a"}, None, {"sku": "c"}]


def test_cancel_and_pause_reach_the_elements(client) -> None:
    wid = _start(client, _doc(max_parallel=4), [{"sku": str(i)} for i in range(10)])
    wf = client.get_workflow(wid)
    client.control_workflow(wid, "PAUSE", wf.control_revision, "look first")
    assert client.claim_tasks(["fan"], max_tasks=4) == []  # a paused workflow's elements are not handed out
    wf = client.get_workflow(wid)
    client.control_workflow(wid, "RESUME", wf.control_revision, "go on")
    claimed = client.claim_tasks(["fan"], max_tasks=2)
    assert len(claimed) == 2
    wf = client.get_workflow(wid)
    client.control_workflow(wid, "CANCEL", wf.control_revision, "order withdrawn")
    assert client.get_workflow(wid).state == "CANCELLING"  # the claimed elements keep their permit
    assert _open_element_tasks(wid) == 2
    for t in claimed:
        client.complete_task(t.id, t.epoch, {"late": True})
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "CANCELLED" and _open_element_tasks(wid) == 0
    assert client.get_workflow_step(wid, "reserve").step.state == "CANCELLED"


def test_a_fan_out_over_an_empty_array_succeeds_with_an_empty_output(client) -> None:
    wid = _start(client, _doc(), [])
    assert _open_element_tasks(wid) == 0
    _finish_after(client, wid)
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "SUCCEEDED" and wf.output == {"reserved": []}


def test_more_elements_than_the_cap(client) -> None:
    # static: a literal array longer than max_items, or a cap above the platform's, is a 400 at publish
    static = _doc(max_items=2)
    static["steps"][0]["for_each"]["items"] = [1, 2, 3]
    with pytest.raises(InvalidArgument) as info:
        client.ensure_definition("fan-static-" + uuid.uuid4().hex[:6], static)
    fields = {e["field"]: e["message"] for e in info.value.errors}
    assert "FANOUT_TOO_LARGE" in fields["steps[0].for_each.items"]
    with pytest.raises(InvalidArgument) as info:
        client.ensure_definition("fan-cap-" + uuid.uuid4().hex[:6], _doc(max_items=10_001))
    assert "steps[0].for_each.max_items" in {e["field"] for e in info.value.errors}
    # at run time: the step fails with a code, nothing runs
    wid = _start(client, _doc(max_items=3), [{"sku": "x"}] * 4)
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "FAILED" and _open_element_tasks(wid) == 0
    error = client.get_workflow_step(wid, "reserve").error
    assert error["code"] == "FANOUT_TOO_LARGE" and (error["count"], error["max_items"]) == (4, 3)
    wid = _start(client, _doc(), {"not": "a list"})
    assert client.wait_for_workflow(wid, timeout=30).state == "FAILED"
    assert client.get_workflow_step(wid, "reserve").error["code"] == "FANOUT_NOT_AN_ARRAY"


def test_the_deadline_reaches_the_elements(client, spawn_worker) -> None:
    from tests.web.wf_ops import ENGINE_WORKER_ENV

    spawn_worker("advance", env=ENGINE_WORKER_ENV)  # the instance's watch (deadline and task deadlines)
    doc = {**_doc(max_parallel=3), "deadline_seconds": 2}
    wid = _start(client, doc, [{"sku": str(i)} for i in range(6)])
    claimed = client.claim_tasks(["fan"], max_tasks=1)
    assert len(claimed) == 1 and _open_element_tasks(wid) == 3
    wf = client.wait_for_workflow(wid, timeout=60)
    with transaction() as conn:
        code = conn.execute(
            text("SELECT error->>'code' FROM workflow_instances WHERE id = :i"), {"i": wid}
        ).scalar()
    assert wf.state == "FAILED" and code == "DEADLINE_EXCEEDED"
    assert _open_element_tasks(wid) == 0  # every open element task was cancelled with the instance


def test_an_element_costs_one_task_row_and_nothing_else(client) -> None:
    wid = _start(client, _doc(max_parallel=5), [{"sku": str(i)} for i in range(12)])
    claimed = client.claim_tasks(["fan"], max_tasks=16)
    while claimed:
        _, claimed = client.complete_and_claim([(t.id, t.epoch, {}) for t in claimed], ["fan"], max_tasks=16)
    _finish_after(client, wid)
    assert client.wait_for_workflow(wid, timeout=30).state == "SUCCEEDED"
    with transaction() as conn:
        counts = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM workflow_tasks WHERE instance_id = :i AND element IS NOT NULL),"
                " (SELECT count(*) FROM workflow_steps WHERE instance_id = :i),"
                " (SELECT count(*) FROM workflow_activations WHERE instance_id = :i),"
                " (SELECT count(*) FROM workflow_jobs WHERE instance_id = :i AND payload ? 'element')"
            ),
            {"i": wid},
        ).one()
    assert tuple(counts) == (12, 2, 0, 0)  # one task per element; the step's own row; no activation or job


def test_an_elements_retry_waits_for_the_steps_backoff(client) -> None:
    """An element's next attempt follows the step's retry policy as a plain task's does: not claimable
    before its backoff (the element counts as running meanwhile, so no other element takes its place);
    once the backoff's wake is due, attempt 2 is handed out."""
    from app.db import get_engine
    from tests.engine.helpers import make_due, run_jobs

    doc = _doc(max_parallel=1)
    doc["steps"][0]["retry"] = {"max_attempts": 2, "backoff_seconds": 60}
    wid = _start(client, doc, [{"sku": "a"}, {"sku": "b"}])
    [first] = client.claim_tasks(["fan"], max_tasks=4)
    assert first.input["n"] == 0
    client.fail_task(first.id, first.epoch, "flaky", retryable=True)
    run_jobs(get_engine())  # nothing is due: the backoff's wake waits a minute
    assert client.claim_tasks(["fan"], max_tasks=4) == []  # neither the retry nor element 1
    view = _fan_out(client, wid)
    assert (view["pending"], view["running"], view["done"], view["failed"]) == (1, 1, 0, 0)
    assert "next_attempt_at" in view["elements"][0]
    with transaction() as conn:
        wait = conn.execute(
            text("SELECT EXTRACT(EPOCH FROM next_attempt_at - now()) FROM workflow_tasks WHERE id = :t"),
            {"t": first.id},
        ).scalar_one()
    assert 50 < wait <= 60  # backoff_seconds * 2^(attempt-1) for the first retry, as a plain task's
    make_due(get_engine())
    run_jobs(get_engine())
    [again] = client.claim_tasks(["fan"], max_tasks=4)
    assert (again.input["n"], again.attempt) == (0, 2)
    _, claimed = client.complete_and_claim([(again.id, again.epoch, {"ok": 0})], ["fan"], max_tasks=4)
    assert [t.input["n"] for t in claimed] == [1]
    client.complete_task(claimed[0].id, claimed[0].epoch, {"ok": 1})
    _finish_after(client, wid)
    wf = client.wait_for_workflow(wid, timeout=30)
    assert wf.state == "SUCCEEDED" and wf.output["reserved"] == [{"ok": 0}, {"ok": 1}]


def test_an_element_waiting_for_its_backoff_fails_for_good_when_the_step_stops_starting(client) -> None:
    """Another element fails for good during an element's backoff: the retry does not start, and the
    step fails with the first failed element once nothing is in flight."""
    from app.db import get_engine
    from tests.engine.helpers import make_due, run_jobs

    doc = _doc(max_parallel=2)
    doc["steps"][0]["retry"] = {"max_attempts": 2, "backoff_seconds": 60}
    wid = _start(client, doc, [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}])
    tasks = {t.input["n"]: t for t in client.claim_tasks(["fan"], max_tasks=4)}
    client.fail_task(tasks[0].id, tasks[0].epoch, "flaky", retryable=True)  # waits for its backoff
    client.fail_task(tasks[1].id, tasks[1].epoch, "gone", retryable=False)  # failed for good
    assert client.get_workflow(wid).state == "RUNNING"  # element 0 still counts as running
    make_due(get_engine())
    run_jobs(get_engine())
    wf = client.wait_for_workflow(wid, timeout=30)
    error = client.get_workflow_step(wid, "reserve").error
    assert wf.state == "FAILED" and error["code"] == "FANOUT_ELEMENT_FAILED" and error["element"] == 0
    assert _open_element_tasks(wid) == 0
