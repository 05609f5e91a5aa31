"""Every process of the Procfile (gunicorn's `web`, both worker pools, the scheduler) and a `ledgerflow`
command refuse a bad setting at start: one line on stderr naming the variable and what is allowed,
exit status 2, nothing started (no traceback, no "Booting worker")."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROCFILE = dict(
    line.split(": ", 1)
    for line in (ROOT / "Procfile").read_text().splitlines()
    if line and not line.startswith("#")
)
COMMANDS = {**PROCFILE, "cli": "ledgerflow credentials list"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command: str, **env: str) -> subprocess.CompletedProcess:
    """Run a Procfile command as honcho would (through sh); were the check to miss, the process would
    run: it is stopped (its whole process group) after a generous deadline, and the test fails."""
    bin_dir = os.path.dirname(sys.executable)  # ledgerflow and gunicorn of this virtualenv
    full = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": bin_dir + os.pathsep + os.environ["PATH"],
        "PORT": str(_free_port()),
        "LEDGERFLOW_BIND_HOST": "127.0.0.1",
        **env,
    }
    proc = subprocess.Popen(
        ["sh", "-c", command],
        cwd=ROOT,
        env=full,
        text=True,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


@pytest.mark.parametrize("process", sorted(COMMANDS))
def test_a_bad_setting_stops_the_process_at_start_with_one_line(process: str):
    r = start(COMMANDS[process], LEDGERFLOW_SLOTS="abc")
    assert (r.returncode, r.stderr, r.stdout) == (
        2,
        "Error: LEDGERFLOW_SLOTS: must be an integer from 1 to 64\n",
        "",
    ), r.stderr


def test_every_bad_setting_is_named_in_the_one_line():
    r = start(
        COMMANDS["worker-advance"], LEDGERFLOW_SLOTS="abc", LOG_FORMAT="xml", LEDGERFLOW_RENEW_SECONDS="90"
    )
    assert r.returncode == 2
    assert r.stderr == (
        "Error: LEDGERFLOW_SLOTS: must be an integer from 1 to 64 "
        "(also not allowed: LOG_FORMAT, LEDGERFLOW_RENEW_SECONDS)\n"
    )
