"""The first hour, round three (issue 45): a workflow that ends while paused is not paused any more (the
flag, the CLI and the console agree, and RESUME says why there is nothing to resume); a paused timer is
shown as paused with its time left (step view, `workflows show`, console), not as a fire time that passes;
an ended workflow's console page shows no deadline. On the test kit's server (real worker pools)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import pytest

from ledgerflow.client import StateConflict
from ledgerflow.step_table import left
from tests.web.test_console import _csrf

ONE_SIGNAL = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 3600,
    "signals": [{"name": "go", "payload_version": "v1", "schema": {"type": "object"}}],
    "steps": [{"key": "wait", "kind": "SIGNAL", "signal": "go", "payload_version": "v1", "correlation": "c"}],
    "output": {"got": "$.steps.wait.output"},
}
ONE_HOUR = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 7200,
    "steps": [{"key": "cool_off", "kind": "TIMER", "delay_seconds": 3600}],
}


def _console(env) -> httpx.Client:
    c = httpx.Client(base_url=env.url, follow_redirects=False)
    page = c.get("/console/login")
    assert (
        c.post(
            "/console/login", data={"token": env.token, "csrf_token": _csrf(page.content), "next": ""}
        ).status_code
        == 302
    )
    return c


def _show(env, wid: str) -> str:
    """`ledgerflow workflows show` on the kit's database (the command reads the database)."""
    done = subprocess.run(
        [sys.executable, "-m", "ledgerflow.cli", "workflows", "show", wid],
        env={**os.environ, **env.environ(), "DATABASE_URL": env.server.database_url, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _pause(env, wid: str) -> None:
    inst = env.client.get_workflow(wid)
    env.client.control_workflow(wid, "PAUSE", inst.control_revision, "hold")


def test_a_workflow_that_ends_while_paused_is_not_paused(ledgerflow_env):
    env = ledgerflow_env
    wid = env.start(env.publish("one-signal", ONE_SIGNAL), {})
    env.wait_for_step(wid, "wait", "WAITING")
    _pause(env, wid)
    env.client.send_workflow_signal(
        wid, name="go", payload_version="v1", target_step_key="wait", target_activation_sequence=1,
        correlation_key="c", payload={"n": 1}, reason="go",
    )  # fmt: skip
    done = env.wait(wid)
    assert done.state == "SUCCEEDED"  # a signal its wait consumed is a result, taken while paused
    assert done.paused is False  # was True for good before: an ended workflow is never paused
    with pytest.raises(StateConflict, match="SUCCEEDED"):
        env.client.control_workflow(wid, "RESUME", done.control_revision, "go on")
    page = _console(env).get(f"/console/workflows/{wid}").text
    assert 'id="wf-paused"' not in page
    assert "(paused)" not in _show(env, wid)


def test_a_paused_timer_shows_its_time_left(ledgerflow_env):
    env = ledgerflow_env
    wid = env.start(env.publish("one-hour", ONE_HOUR), {})
    env.wait_for_step(wid, "cool_off", "WAITING")
    _pause(env, wid)
    wait = env.client.get_workflow_step(wid, "cool_off").wait
    assert wait["paused"] is True and 3_000_000 < wait["remaining_ms"] <= 3_600_000
    shown = _show(env, wid)
    assert "timer paused" in shown and " left" in shown and "timer until" not in shown
    page = _console(env).get(f"/console/workflows/{wid}").text
    assert re.search(r"fires: paused, (1 h 0 min|[0-9]{1,2} min [0-9]{1,2} s) left", page)
    assert "fires <" not in page  # no fire time ("fires 2 min ago") while paused
    inst = env.client.get_workflow(wid)
    env.client.control_workflow(wid, "RESUME", inst.control_revision, "go on")
    resumed = env.client.get_workflow_step(wid, "cool_off").wait
    assert "paused" not in resumed and "remaining_ms" not in resumed


def test_an_ended_workflow_shows_no_deadline(ledgerflow_env):
    env = ledgerflow_env
    wid = env.start(env.publish("one-hour", ONE_HOUR), {})
    env.wait_for_step(wid, "cool_off", "WAITING")
    console = _console(env)
    assert "<dt>Deadline</dt>" in console.get(f"/console/workflows/{wid}").text
    env.skip_time(hours=1)
    assert env.wait(wid).state == "SUCCEEDED"
    assert "<dt>Deadline</dt>" not in console.get(f"/console/workflows/{wid}").text


@pytest.mark.parametrize(
    ("ms", "shown"),
    [
        (0, "0 s"),
        (45_000, "45 s"),
        (3_540_000, "59 min"),
        (3_600_000, "1 h"),
        (86_340_000, "23 h 59 min"),
        (183_600_000, "2 d 3 h"),
    ],
)
def test_time_left_for_people(ms, shown):
    assert left(ms) == shown


def test_a_paused_retry_backoff_shows_its_time_left(ledgerflow_env):
    env = ledgerflow_env
    doc = {
        "version": "v1",
        "input_schema": {"type": "object"},
        "deadline_seconds": 7200,
        "steps": [
            {
                "key": "c",
                "kind": "TASK",
                "queue": "kit.flaky",
                "retry": {"max_attempts": 2, "backoff_seconds": 600},
            }
        ],
    }

    @env.task("kit.flaky")
    def flaky(task) -> dict:
        if task.attempt == 1:
            raise ConnectionError("busy")
        return {}

    wid = env.start(env.publish("flaky", doc), {})
    env.wait_for_step(wid, "c", "WAITING")  # the 10 min backoff
    _pause(env, wid)
    step = env.client.get_workflow_step(wid, "c")
    assert (
        500_000
        < env.client.request("GET", f"/v1/workflows/{wid}/steps/c")["data"]["next_attempt_remaining_ms"]
        <= 600_000
    )
    assert step.next_attempt_at is not None
    assert "next attempt paused" in _show(env, wid)
