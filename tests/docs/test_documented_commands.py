"""Every command block (```sh) of README.md and docs/tutorial.md, run in order against a live
server started by `make run` itself, in a shell whose only extra settings are LEDGERFLOW_URL and the
server's PORT (the suite's server is not on port 5000: the README tells a second shell to set the same
PORT as `make run`'s, and `127.0.0.1:5000` in the blocks becomes its port too).

`make ...` lines are what started that server: their `VAR=value` prefixes are given to it (e.g.
LEDGERFLOW_HANDLERS=examples.hello), and they are not run again. Exported variables carry from one
block to the next, as in one terminal. A block fails the test when it exits non-zero, prints a
traceback or a warning, or (for the examples) does not print its documented outcome."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from tests.docs.live import ROOT, embedded, start_make_run, stop_embedded

DOCS = ["README.md", "docs/tutorial.md"]
MAKE_LINE = re.compile(r"^\s*((?:[A-Z_]+=\S+\s+)*)make\s+\w+")
# what each documented script must print (besides exiting 0)
OUTCOMES = {
    "examples/first_workflow.py": ["SUCCEEDED: {", "hello.greet: task", "completed in"],
    "examples.hello": ["succeeded"],
    "ledgerflow enqueue automation_action": ['"created": true'],
    "examples/start_orders.py": ["order A-1: SUCCEEDED {'charged': 42, 'attempts': 2}", "order A-2: FAILED"],
    "examples/task_worker.py": ["failed in", "(retryable): ConnectionError", "attempt 2) completed in"],
    "examples/signals.py": ["is now CONSUMED", "SUCCEEDED: {"],
    "examples/pause_cancel.py": ["still ACTIVE (not claimed)", "SUCCEEDED: {'pages': 3}", "CANCELLED"],
    "examples/compensation.py": ["FAILED (stop_kind FAILURE); undone in this order: payment, hotel"],
    "examples/order_flow.py": [
        "order A-1: SUCCEEDED",
        "  skipped: manual_approval",
        "order B-2: SUCCEEDED",
        "  skipped: auto_approve",
        "order DECLINED-3: FAILED",
    ],
    "examples/recovery.py": ["NEEDS_REVIEW", "resolved: COMPENSATION_FAILED", "FAILED (stop_kind FAILURE)"],
    "/jobs/runtime-status": ['"live_workers"'],
    "ledgerflow definitions publish": ["definition first_definition (", "version v1 published"],
    "ledgerflow workflows start": ['SUCCEEDED: output {"greeting": "Ada"}'],
}


def blocks(doc: str) -> list[str]:
    text = (ROOT / doc).read_text()
    return [m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```", text, re.S | re.M)]


def server_env(docs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for doc in docs:
        for block in blocks(doc):
            for line in block.splitlines():
                m = MAKE_LINE.match(line)
                if m:
                    env.update(kv.split("=", 1) for kv in shlex.split(m.group(1)))
    return env


@pytest.fixture(
    scope="module", params=["the machine's PostgreSQL and Redis", "the embedded default (no DATABASE_URL)"]
)
def server(request, tmp_path_factory):
    """`make run` as the docs start it: on the services DATABASE_URL / REDIS_URL name, and as a newcomer
    runs it, with neither set (the embedded PostgreSQL and Redis, which every command then finds)."""
    tmp = tmp_path_factory.mktemp("docs")
    shell_env, unset = embedded(tmp) if request.param.startswith("the embedded") else ({}, ())
    run = start_make_run(tmp, server_env(DOCS), shell_env=shell_env, unset=unset)
    try:
        yield run
        assert run.stop(signal.SIGTERM) == [], run.log()
    finally:
        run.stop(signal.SIGKILL, group=True, timeout=5)
        stop_embedded(run)


def run_blocks(doc: str, server, tmp_path: Path) -> str:
    state = tmp_path / "exports.sh"
    state.write_text("")
    env = server.env(LEDGERFLOW_URL=server.url, PORT=str(server.port))
    env.pop("LEDGERFLOW_TOKEN", None)
    transcript = []
    ran = 0
    for i, block in enumerate(blocks(doc), 1):
        lines = [line for line in block.splitlines() if not MAKE_LINE.match(line)]
        script = "\n".join(lines).replace("127.0.0.1:5000", f"127.0.0.1:{server.port}").strip()
        if not script:
            continue
        ran += 1
        proc = subprocess.run(
            ["bash", "-c", f"set -eo pipefail\nsource {state}\n{script}\nexport -p > {state}"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        output = proc.stdout + proc.stderr
        transcript.append(f"--- {doc} block {i}:\n{script}\n--- output:\n{output}")
        assert proc.returncode == 0, "\n".join(transcript) + "\n--- server log:\n" + server.log()[-4000:]
        assert "Traceback" not in output and "Warning" not in output, transcript[-1]
        for needle, wanted in OUTCOMES.items():
            if needle in script:
                for w in wanted:
                    assert w in output, f"{needle}: {w!r} not printed\n{transcript[-1]}"
    assert ran >= 3, f"{doc}: no command block found"
    return "\n".join(transcript)


def test_readme_commands_work_as_written(server, tmp_path):
    assert server.url.endswith(str(server.port)) and "examples.hello" in server_env(["README.md"]).values()
    run_blocks("README.md", server, tmp_path)
    # the banner names the address gunicorn really bound
    log = server.log()
    assert f"web server on http://127.0.0.1:{server.port}" in log
    assert f"Listening at: http://127.0.0.1:{server.port}" in log
    assert "Warning" not in log


def test_tutorial_commands_work_as_written(server, tmp_path):
    run_blocks("docs/tutorial.md", server, tmp_path)
