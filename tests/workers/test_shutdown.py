"""Every Procfile process stops within 25 s of SIGTERM with work in flight, nothing lost and nothing
counted as a failure: real `ledgerflow worker` processes of both pools, the real
`ledgerflow scheduler`, and the Procfile's `web` command (gunicorn, its config, 2 workers) with a
long-poll claim waiting. Heroku sends SIGTERM and kills 30 s later."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from app.ledger.states import WORKER_SHUTDOWN
from tests.engine.helpers import publish
from tests.integrations.test_schedules import DOC, NS, backdate, create
from tests.ledger_helpers import add_job, attempts, job, scalar, wait_for
from tests.web.wf_live import make_namespace, waiting_long_polls

ROOT = Path(__file__).resolve().parents[2]
BUDGET_SECONDS = 25  # every process is out within this long of SIGTERM


def _running(db) -> int:
    return scalar(db, "SELECT count(*) FROM workflow_jobs WHERE status = 'running'")


def _sigterm_and_wait(proc: subprocess.Popen) -> tuple[int, float]:
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=BUDGET_SECONDS + 15)  # generous: the assertion below is the budget
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return code, time.monotonic() - sent


@pytest.mark.parametrize(("pool", "job_type"), [("advance", "delay_wake"), ("outbound", "event_dispatch")])
def test_a_worker_finishes_what_it_can_hands_back_the_rest_and_exits(db, spawn_worker, pool, job_type):
    grace = 8.0
    worker = spawn_worker(
        pool, env={"LEDGERFLOW_SHUTDOWN_GRACE_SECONDS": str(grace), "LEDGERFLOW_POLL_SECONDS": "0.2"}
    )
    node = re.search(r"ledgerflow worker (\w+) ready", worker.log()).group(1)
    quick = [add_job(db, job_type, {"mode": "sleep", "seconds": 1}) for _ in range(2)]
    held = [
        add_job(db, job_type, {"mode": "hold"}),
        add_job(db, job_type, {"mode": "hold", "ignore_abort": True}),
    ]
    wait_for(lambda: _running(db) == 4, timeout=30)  # every slot busy
    waiting = [add_job(db, job_type, {"mode": "noop"}) for _ in range(5)]  # due, behind them

    code, took = _sigterm_and_wait(worker.proc)
    log = worker.log()
    assert code == 0, log
    assert took < BUDGET_SECONDS, (took, log)
    # what finished inside the grace is settled; nothing new was claimed after SIGTERM
    assert [job(db, j)["status"] for j in quick] == ["succeeded", "succeeded"], log
    assert all((job(db, j)["status"], job(db, j)["attempts"]) == ("pending", 0) for j in waiting)
    # what still ran was handed back: due again at once, the attempt interrupted, not failed
    for j in held:
        jr = job(db, j)
        assert (jr["status"], jr["error_code"], jr["attempts"]) == ("pending", WORKER_SHUTDOWN, 1), jr
        assert scalar(db, "SELECT run_at <= now() FROM workflow_jobs WHERE id = :id", id=j)
        assert [(a["status"], a["error_code"], a["worker_id"]) for a in attempts(db, j)] == [
            ("canceled", WORKER_SHUTDOWN, node)
        ]
    assert log.count("handed back at shutdown") == 2, log
    assert scalar(db, "SELECT status FROM workflow_worker_nodes WHERE node_id = :n", n=node) == "stopped"

    # the next worker runs all of them; not one attempt counts as a failure
    spawn_worker(pool, env={"LEDGERFLOW_POLL_SECONDS": "0.2"})
    every = quick + held + waiting
    wait_for(lambda: all(job(db, j)["status"] == "succeeded" for j in every), timeout=30)
    assert [job(db, j)["result"] for j in held] == [{"attempt": 2}, {"attempt": 2}]
    assert scalar(db, "SELECT count(*) FROM workflow_job_executions WHERE status = 'failed'") == 0


def test_the_scheduler_exits_between_ticks(db, tmp_path):
    """Due schedules are being handed out every 0.2 s when SIGTERM arrives: the scheduler finishes the
    tick it is in (each batch one transaction) and exits; every launch job it committed was logged."""
    with db.begin() as conn:
        conn.execute(text("TRUNCATE workflow_schedules, workflow_schedule_fires CASCADE"))
    def_id = publish(db, NS, DOC)
    ids = [create(db, def_id)["id"] for _ in range(20)]
    log_path = tmp_path / "scheduler.log"
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ledgerflow.cli", "scheduler"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "LEDGERFLOW_SCHEDULE_TICK_SECONDS": "0.2",
                "LOG_LEVEL": "INFO",
            },
        )
    try:
        wait_for(lambda: "scheduler ready" in log_path.read_text(), timeout=30)
        stop = threading.Event()

        def make_due() -> None:  # a schedule falls due at every tick while the scheduler runs
            while not stop.is_set():
                for sid in ids:
                    backdate(db, sid, 61)
                    if stop.wait(0.05):
                        return

        feeder = threading.Thread(target=make_due, daemon=True)
        feeder.start()
        wait_for(lambda: _launch_jobs(db) >= 3, timeout=30)
        code, took = _sigterm_and_wait(proc)
        stop.set()
        feeder.join(5)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = log_path.read_text()
    assert code == 0 and took < BUDGET_SECONDS and "scheduler: stopped" in log, log
    assert "Traceback" not in log, log
    # every hand-out committed before the exit was completed and logged (no tick cut in the middle)
    assert _launch_jobs(db) == log.count("handed out"), log


def _launch_jobs(db) -> int:
    return scalar(db, "SELECT count(*) FROM workflow_jobs WHERE type = 'schedule_launch'")


# --------------------------------------------------------------------------- web
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_procfile_web(tmp_path: Path, workers: int = 2, **env: str) -> tuple[subprocess.Popen, str, Path]:
    """The Procfile's ``web`` command as written (its gunicorn config), on a free local port."""
    line = next(ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith("web:"))
    assert "--config gunicorn.conf.py" in line and f"--workers {2}" in line
    port = _free_port()
    log_path = tmp_path / f"web-{port}.log"
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            [
                gunicorn,
                "--config",
                "gunicorn.conf.py",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                str(workers),
                "--no-control-socket",
                "web:create_app()",
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), **env},
        )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    wait_for(up, timeout=60, interval=0.2)
    assert proc.poll() is None, log_path.read_text()
    return proc, url, log_path


def test_web_ends_waiting_long_polls_at_once_and_exits(tmp_path):
    if not os.environ.get("REDIS_URL"):
        pytest.skip("the waiting long polls are counted in Redis")
    proc, url, log_path = start_procfile_web(tmp_path)
    try:
        ns = make_namespace(url)
        answers: list[httpx.Response] = []

        def claim(queue: str) -> None:
            answers.append(
                httpx.post(
                    url + "/v1/tasks/claim",
                    json={"queues": [queue], "wait_seconds": 30, "max_tasks": 1},
                    headers={
                        "Authorization": f"Bearer {ns.tokens['worker']}",
                        "Idempotency-Key": uuid.uuid4().hex,
                    },
                    timeout=60,
                )
            )

        threads = [threading.Thread(target=claim, args=(f"idle-{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        wait_for(lambda: waiting_long_polls(ns.tokens["worker"]) == 3, timeout=30)
        code, took = _sigterm_and_wait(proc)
        for t in threads:
            t.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = log_path.read_text()
    assert code == 0 and took < BUDGET_SECONDS, (took, log)
    # each waiting claim answered "nothing yet" (a task worker polls again) instead of waiting 30 s
    assert [(r.status_code, r.json()["data"]["tasks"]) for r in answers] == [(200, [])] * 3, log
    assert "graceful timeout" not in log.lower(), log
    assert waiting_long_polls(ns.tokens["worker"]) == 0  # every slot of the cap given back
