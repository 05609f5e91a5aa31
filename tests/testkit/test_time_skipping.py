"""The test kit (ledgerflow.testing) as a user's test suite uses it: a workflow with a 1 h TIMER, a TASK
whose retry waits 10 min, and a SIGNAL wait with a 1 day timeout runs to its end in seconds with
``skip_time``; the wall time is printed, not asserted."""

from __future__ import annotations

import time

import pytest

from ledgerflow.client import NotFound, Task

WAITS_A_DAY = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 3 * 86400,
    "signals": [{"name": "approved", "payload_version": "v1", "schema": {"type": "object"}}],
    "steps": [
        {"key": "cool_off", "kind": "TIMER", "delay_seconds": 3600},
        {
            "key": "charge",
            "kind": "TASK",
            "queue": "kit.charge",
            "after": ["cool_off"],
            "retry": {"max_attempts": 2, "backoff_seconds": 600},
        },
        {
            "key": "approval",
            "kind": "SIGNAL",
            "after": ["charge"],
            "signal": "approved",
            "payload_version": "v1",
            "correlation": "order-1",
            "timeout_seconds": 86400,
        },
    ],
    "output": {"charged": "$.steps.charge.output.charged", "by": "$.steps.approval.output.by"},
}


def _error(env, wid: str, key: str) -> str:
    return str(env.client.get_workflow_step(wid, key).error)


def _charging(env) -> list[int]:
    attempts: list[int] = []

    @env.task("kit.charge")
    def charge(task: Task) -> dict:
        attempts.append(task.attempt)
        if task.attempt == 1:
            raise ConnectionError("the payment service is busy")
        return {"charged": True}

    return attempts


def _through_timer_and_backoff(env, wid: str) -> None:
    env.wait_for_step(wid, "cool_off", "WAITING")
    assert env.skip_time(hours=1)["jobs"] >= 1  # the timer's wake
    env.wait_for_step(wid, "charge", "WAITING")  # the first attempt failed: 10 min backoff
    env.skip_time(minutes=10)
    env.wait_for_step(wid, "approval", "WAITING")


def test_a_timer_a_retry_backoff_and_a_signal_timeout_in_seconds(ledgerflow_env):
    env = ledgerflow_env
    attempts = _charging(env)
    env.publish("waits-a-day", WAITS_A_DAY)
    began = time.monotonic()
    wid = env.start("waits-a-day", {})
    _through_timer_and_backoff(env, wid)
    moved = env.skip_time(days=1)
    assert moved["waits"] == 1 and moved["jobs"] >= 1
    done = env.wait(wid)
    took = time.monotonic() - began
    env.note(
        f"1 h TIMER + 10 min retry backoff + 1 day SIGNAL timeout: ended {done.state} in {took:.2f} s of wall time"
    )
    assert attempts == [1, 2]
    assert done.state == "FAILED"
    assert env.client.get_workflow_step(wid, "approval").step.state == "FAILED"
    assert "SIGNAL_TIMEOUT" in _error(env, wid, "approval")


def test_the_signal_in_time_and_the_workflow_succeeds(ledgerflow_env):
    env = ledgerflow_env
    _charging(env)
    env.publish("waits-a-day", WAITS_A_DAY)
    wid = env.start("waits-a-day", {})
    _through_timer_and_backoff(env, wid)
    env.skip_time(hours=23)  # not yet a day: the wait goes on
    assert env.client.get_workflow_step(wid, "approval").step.state == "WAITING"
    env.client.send_workflow_signal(
        wid,
        name="approved",
        payload_version="v1",
        target_step_key="approval",
        target_activation_sequence=1,
        correlation_key="order-1",
        payload={"by": "grace"},
        reason="approved",
    )
    done = env.wait(wid)
    assert done.state == "SUCCEEDED"
    assert done.output == {"charged": True, "by": "grace"}


def test_time_beyond_the_span_stays_where_it_is(ledgerflow_env):
    env = ledgerflow_env
    env.publish("waits-a-day", WAITS_A_DAY)
    wid = env.start("waits-a-day", {})
    env.wait_for_step(wid, "cool_off", "WAITING")
    moved = env.skip_time(minutes=59)
    assert moved["jobs"] == 0 and moved["waits"] == 0
    time.sleep(0.5)
    assert env.client.get_workflow_step(wid, "cool_off").step.state == "WAITING"


def test_the_workflow_deadline_falls_due_too(ledgerflow_env):
    env = ledgerflow_env
    doc = {**WAITS_A_DAY, "deadline_seconds": 1800}
    env.publish("short-deadline", doc)
    wid = env.start("short-deadline", {})
    env.wait_for_step(wid, "cool_off", "WAITING")
    env.skip_time(minutes=30)  # the deadline (30 min) comes before the timer (1 h)
    done = env.wait(wid)
    assert done.state == "FAILED"
    assert done.stop_kind == "FAILURE"  # DEADLINE_EXCEEDED
    assert env.client.get_workflow_step(wid, "cool_off").step.state != "SUCCEEDED"


def test_a_paused_workflow_keeps_its_timer(ledgerflow_env):
    env = ledgerflow_env
    env.publish("waits-a-day", WAITS_A_DAY)
    wid = env.start("waits-a-day", {})
    env.wait_for_step(wid, "cool_off", "WAITING")
    inst = env.client.get_workflow(wid)
    env.client.control_workflow(wid, "PAUSE", inst.control_revision, "hold it")
    assert env.skip_time(hours=2)["jobs"] == 0
    assert env.client.get_workflow_step(wid, "cool_off").step.state == "WAITING"


def test_namespaces_are_apart(ledgerflow_server):
    """A skip moves only its own namespace's times; each test's env has a namespace of its own."""
    first, second = ledgerflow_server.environment("a"), ledgerflow_server.environment("b")
    try:
        assert first.namespace != second.namespace
        for env in (first, second):
            env.publish("waits-a-day", WAITS_A_DAY)
        a, b = first.start("waits-a-day", {}), second.start("waits-a-day", {})
        first.wait_for_step(a, "cool_off", "WAITING")
        second.wait_for_step(b, "cool_off", "WAITING")
        first.skip_time(hours=1)
        first.wait_for_step(a, "charge", "ACTIVE")
        assert second.client.get_workflow_step(b, "cool_off").step.state == "WAITING"
        with pytest.raises(NotFound):
            first.client.get_workflow(b)  # another namespace's workflow is not found
    finally:
        first.close()
        second.close()


NIGHTLY = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 600,
    "steps": [{"key": "report", "kind": "TASK", "queue": "kit.report"}],
    "output": {"pages": "$.steps.report.output.pages"},
}


def test_a_schedule_fire_within_the_span_launches_now(ledgerflow_env):
    env = ledgerflow_env

    @env.task("kit.report")
    def report(task: Task) -> dict:
        return {"pages": 1}

    definition = env.publish("nightly", NIGHTLY)
    schedule = env.client.create_schedule("hourly", definition, "v1", {}, interval_seconds=3600)
    env.start_worker()
    assert env.skip_time(minutes=30)["schedules"] == 0  # the next fire is up to an hour away
    moved = env.skip_time(hours=1)
    assert moved["schedules"] == 1
    deadline = time.monotonic() + 30
    while not (fires := env.client.list_schedule_fires(schedule["id"])) and time.monotonic() < deadline:
        time.sleep(0.05)  # the launch job writes the fire
    assert [f["status"] for f in fires] == ["LAUNCHED"]
    done = env.wait(fires[0]["instance_id"])
    assert done.state == "SUCCEEDED"
    # its next fire moved past the span: a second skip of the same hour launches nothing more
    assert env.skip_time(minutes=59)["schedules"] == 0


def test_a_task_nobody_takes_times_out(ledgerflow_env):
    env = ledgerflow_env
    doc = {
        "version": "v1",
        "input_schema": {"type": "object"},
        "deadline_seconds": 86400,
        "steps": [{"key": "t", "kind": "TASK", "queue": "kit.nobody", "timeout_seconds": 300}],
    }
    wid = env.start(env.publish("nobody", doc), {})
    env.wait_for_step(wid, "t", "ACTIVE")
    assert env.skip_time(minutes=5)["tasks"] == 1
    assert env.wait(wid).state == "FAILED"
    assert "TIMEOUT" in str(env.client.get_workflow_step(wid, "t").error).upper()


def test_a_poll_s_next_round_an_hour_later(ledgerflow_env):
    env = ledgerflow_env
    doc = {
        "version": "v1",
        "input_schema": {"type": "object"},
        "deadline_seconds": 86400,
        "steps": [
            {
                "key": "p",
                "kind": "POLL",
                "queue": "kit.poll",
                "interval_ms": 3_600_000,
                "max_rounds": 3,
                "max_attempts_per_round": 1,
            }
        ],
        "output": {"rounds": "$.steps.p.output.round"},
    }

    @env.task("kit.poll")
    def poll(task: Task) -> dict:
        return {"done": task.poll_round >= 2, "round": task.poll_round}

    wid = env.start(env.publish("hourly-poll", doc), {})
    deadline = time.monotonic() + 30
    while env.client.get_workflow_step(wid, "p").poll.get("next_poll_at") is None:
        assert time.monotonic() < deadline, "the first round did not end"
        time.sleep(0.05)
    moved = env.skip_time(hours=1)
    assert moved["jobs"] >= 1 and moved["polls"] == 1
    done = env.wait(wid)
    assert (done.state, done.output) == ("SUCCEEDED", {"rounds": 2})
