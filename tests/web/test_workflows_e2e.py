"""TASK -> TIMER -> SUBWORKFLOW -> POLL completed by an SDK TaskWorker process and a real
`ledgerflow worker` process, over a live server; step views at each stage; task epoch fencing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from ledgerflow.client import ABSENT, StateConflict
from tests.web.wf_live import wf_ns, wf_server  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
ENGINE_WORKER_ENV = {"LEDGERFLOW_HANDLERS": "", "LEDGERFLOW_POLL_SECONDS": "0.2"}


def _publish_example(client) -> tuple[str, str]:
    """The documented example (docs/tutorial.md, docs/reference.md) publishes exactly what this test runs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("publish_and_start", EXAMPLES / "publish_and_start.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.publish(client)


def _until(fn, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)


@pytest.fixture
def task_worker_proc(wf_ns, tmp_path):  # noqa: F811
    procs = []

    def start() -> subprocess.Popen:
        log = open(tmp_path / "task-worker.log", "w")
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LEDGERFLOW_URL": wf_ns.url,
            "LEDGERFLOW_TOKEN": wf_ns.tokens["worker"],
            "LEDGERFLOW_WAIT_SECONDS": "1",
        }
        p = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "order_worker.py")],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def test_task_timer_subworkflow_poll_end_to_end(wf_ns, spawn_worker, task_worker_proc, engine):  # noqa: F811
    c = wf_ns.client()
    def_id, child_def = _publish_example(c)
    started = c.start_workflow(
        def_id, "v1", {"order_id": "A-1", "amount": 9007199254740993, "note": None}, business_key="order A-1 "
    )
    wid = started.instance.id

    # stage 1: the first TASK waits for a worker; everything after it is BLOCKED
    steps = c.get_workflow_steps(wid)
    by_key = {s.key: s for s in steps.steps}
    assert [s.key for s in steps.steps] == ["approve", "cool_off", "reserve", "shipped"]
    assert (
        by_key["approve"].state == "ACTIVE"
        and by_key["approve"].task_id
        and by_key["approve"].activation_sequence == 1
    )
    assert by_key["cool_off"].state == "BLOCKED" and by_key["cool_off"].activation_id is None
    detail = c.get_workflow_step(wid, "approve")
    assert detail.input == {"order_id": "A-1", "amount": 9007199254740993, "note": None}
    assert detail.output is ABSENT and detail.completed_at is None

    # stage 2: the task worker completes the task; the TIMER waits (no ledger worker yet)
    task_worker_proc()
    timer = _until(lambda: (s := c.get_workflow_step(wid, "cool_off")).step.state == "WAITING" and s)
    assert timer.wait["kind"] == "TIMER" and timer.wait["state"] == "WAITING" and "name" not in timer.wait
    approve = c.get_workflow_step(wid, "approve")
    assert approve.step.state == "SUCCEEDED" and approve.output["amount"] == 9007199254740993
    assert approve.output["note"] is None
    assert c.get_workflow(wid).state == "WAITING"

    # stage 3: a real `ledgerflow worker` runs delay_wake, subprocess_spawn/join; POLL rounds follow
    spawn_worker("advance", env=ENGINE_WORKER_ENV)
    final = _until(lambda: (i := c.get_workflow(wid)).state in ("SUCCEEDED", "FAILED") and i, timeout=45)
    assert final.state == "SUCCEEDED", final
    assert final.output == {
        "approved": True,
        "amount": 9007199254740993,
        "reservation": "R-A-1",
        "tracking": "T-A-1",
    }
    assert final.completed_at is not None and final.stop_kind is None
    assert final.business_key == "order A-1 " and final.revision > started.instance.revision

    views = {s.key: s for s in c.get_workflow_steps(wid).steps}
    assert all(s.state == "SUCCEEDED" for s in views.values())
    timer = c.get_workflow_step(wid, "cool_off")
    assert timer.wait["state"] == "RESOLVED" and "resolved_at" in timer.wait
    sub = c.get_workflow_step(wid, "reserve")
    assert sub.output == {"reservation": "R-A-1"} and sub.child_workflow_id
    child = c.get_workflow(sub.child_workflow_id)
    assert child.state == "SUCCEEDED" and child.definition_id == child_def and child.version == "v1"
    poll = c.get_workflow_step(wid, "shipped")
    p = poll.poll
    assert p["used_rounds"] == 2 and p["first_round"] == 1 and p["first_round_attempts_used"] == 1
    assert p["max_rounds"] == 5 and p["max_attempts_per_round"] == 2 and p["interval_ms"] == 200
    assert "resolved_at" in p and "current_task_id" not in p and "next_poll_at" not in p
    last = c.get_task(p["last_task_id"])
    assert last.state == "COMPLETED" and last.poll_round == 2 and last.output["tracking"] == "T-A-1"
    with engine.connect() as conn:
        traces = conn.execute(
            text("SELECT DISTINCT trace_id FROM workflow_instances WHERE id IN (:a, :b)"),
            {"a": wid, "b": child.id},
        ).all()
        job_types = {
            r[0]
            for r in conn.execute(
                text("SELECT type FROM workflow_jobs WHERE instance_id = :a AND status = 'succeeded'"),
                {"a": wid},
            )
        }
    assert len(traces) == 1  # the child carries the parent's trace id
    assert {"delay_wake", "subprocess_spawn", "subprocess_join"} <= job_types
    page = c.list_workflows(state="SUCCEEDED", business_key="order A-1 ")
    assert [i.id for i in page.items] == [wid]


def test_task_epoch_fencing_and_lease_expiry(wf_ns, monkeypatch):  # noqa: F811
    monkeypatch.setenv("LEDGERFLOW_TASK_LEASE_SECONDS", "1")
    c = wf_ns.client()
    d = c.create_definition("fence-" + uuid.uuid4().hex[:6])
    c.publish_version(
        d["id"],
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 600,
            "steps": [{"key": "t", "kind": "TASK", "queue": "q1", "input": "$.input"}],
            "output": {"r": "$.steps.t.output"},
        },
    )
    wid = c.start_workflow(d["id"], "v1", {"x": 1}).instance.id
    w = wf_ns.client("worker")
    [claimed] = w.claim_tasks(["q1"], wait_seconds=0)
    t1 = w.get_task(claimed.id)
    assert claimed.id == c.get_workflow_steps(wid).steps[0].task_id
    assert t1.epoch == 1 and t1.state == "CLAIMED"
    time.sleep(1.3)
    assert w.get_task(t1.id).state == "PENDING"  # the expired lease returned it to its queue
    [t2] = w.claim_tasks(["q1"], wait_seconds=2)
    assert t2.id == t1.id and t2.epoch == 2
    with pytest.raises(StateConflict) as e:
        w.complete_task(t1.id, 1, {"stale": True})
    assert e.value.code == "STATE_CONFLICT"
    with pytest.raises(StateConflict):
        w.heartbeat_task(t1.id, 1)
    assert w.get_task(t1.id).epoch == 2 and c.get_workflow(wid).state == "RUNNING"
    w.heartbeat_task(t1.id, 2)
    done = w.complete_task(t1.id, 2, None)
    assert done.state == "COMPLETED" and done.output is None
    inst = c.get_workflow(wid)
    assert inst.state == "SUCCEEDED" and inst.output == {"r": None}
    # a queue-scoped worker credential sees only its queue; other queues are not found
    scoped = wf_ns.client("worker_q1")
    assert scoped.get_task(t1.id).id == t1.id
    from ledgerflow.client import NotFound

    with pytest.raises(NotFound):
        scoped.claim_tasks(["q2"])


def test_task_failure_retry_policy_then_failed(wf_ns):  # noqa: F811
    c = wf_ns.client()
    d = c.create_definition("retry-" + uuid.uuid4().hex[:6])
    c.publish_version(
        d["id"],
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 600,
            "steps": [
                # backoff 0: attempt 2 at once (no ledger worker here to run the backoff's delay_wake;
                # tests/engine/test_task_protocol_retry_leases_children.py covers the default backoff)
                {
                    "key": "t",
                    "kind": "TASK",
                    "queue": "q1",
                    "retry": {"max_attempts": 2, "backoff_seconds": 0},
                },
                {"key": "after", "kind": "TIMER", "after": ["t"], "delay_seconds": 1},
            ],
        },
    )
    wid = c.start_workflow(d["id"], "v1", {}).instance.id
    w = wf_ns.client("worker")
    [t] = w.claim_tasks(["q1"])
    w.fail_task(t.id, t.epoch, "flaky", retryable=True)
    step = c.get_workflow_step(wid, "t")
    assert step.step.state == "ACTIVE" and step.step.task_id != t.id  # attempt 2 on a new task
    [t2] = w.claim_tasks(["q1"])
    assert t2.attempt == 2
    w.fail_task(t2.id, t2.epoch, "still broken", retryable=True)
    inst = c.get_workflow(wid)
    assert (
        inst.state == "FAILED"
        and inst.stop_kind == "FAILURE"
        and inst.completed_at
        and inst.stop_requested_at
    )
    assert "output" not in c.request("GET", f"/v1/workflows/{wid}")["data"]
    views = {s.key: s.state for s in c.get_workflow_steps(wid).steps}
    assert views == {"t": "FAILED", "after": "BLOCKED"}
