"""`make run` as a newcomer uses it: stopping it (an IDE's stop button, Ctrl-C) gives every
process the same 25 s as Heroku before anything is killed, lets a job in flight finish, frees the port
and ends with exit status 0 (no `make: *** Error 130`); a second `make run` on a port in use says so in
one line before it starts anything."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.docs.live import ROOT, port_open, start_make_run
from tests.ledger_helpers import add_job, job, wait_for

# a job that outlives honcho's own 5 s between SIGTERM and SIGKILL, well inside the shutdown grace
IN_FLIGHT = {"mode": "sleep", "seconds": 8}


@pytest.mark.parametrize("how", ["SIGTERM to make", "SIGINT to the process group (Ctrl-C)"])
def test_make_run_lets_work_in_flight_finish_and_stops_cleanly(how, tmp_path, engine):
    run = start_make_run(tmp_path, {"LEDGERFLOW_HANDLERS": "tests.workers.handlers"})
    started = run.processes()
    assert len(started) >= 8, [p.cmdline() for p in started]  # make, honcho, gunicorn + 2, 3 ledger processes
    j = add_job(engine, "delay_wake", IN_FLIGHT)
    wait_for(lambda: job(engine, j)["status"] == "running", timeout=30)
    if how.startswith("SIGTERM"):
        left = run.stop(signal.SIGTERM, timeout=40)  # an IDE stop button, `kill`
    else:
        left = run.stop(signal.SIGINT, group=True, timeout=40)  # Ctrl-C in the terminal
    log = run.log()
    assert left == [], f"still running after {how}: {left}\n{log}"
    assert not port_open(run.port)
    assert job(engine, j)["status"] == "succeeded", log  # not SIGKILLed after 5 s
    assert "SIGKILL" not in log and "were killed" not in log, log
    assert run.proc.returncode == 0 and "make: ***" not in log, log


def test_a_second_make_run_on_a_port_in_use_says_so_and_starts_nothing(tmp_path):
    first = start_make_run(tmp_path)
    try:
        second = subprocess.run(
            ["make", "-s", "run"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**_env_without_make(), "PORT": str(first.port)},
        )
        out = second.stdout + second.stderr
        assert second.returncode != 0
        assert f"Error: 127.0.0.1:{first.port} is already in use" in out, out
        assert "web server on" not in out and "started (pid" not in out and "{" not in out, out
        assert len([p for p in first.processes() if "ledgerflow worker" in " ".join(p.cmdline())]) == 2
    finally:
        assert first.stop(signal.SIGTERM) == [], first.log()


def _env_without_make() -> dict[str, str]:
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "LEDGERFLOW_URL", "LEDGERFLOW_TOKEN"):
        env.pop(k, None)
    return env
