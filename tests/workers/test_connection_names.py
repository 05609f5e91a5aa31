"""`ledgerflow dev` (what `make run` runs) as a new user runs it: every connection its processes hold
says which process it belongs to (``application_name`` in ``pg_stat_activity``), and its metrics files
live under its own data folder (``LEDGERFLOW_DATA_DIR``), never under another server's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
from sqlalchemy import text

from tests.ledger_helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = {
    "ledgerflow-web",
    "ledgerflow-worker-advance",
    "ledgerflow-worker-outbound",
    "ledgerflow-scheduler",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _names(engine) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT application_name FROM pg_stat_activity "
                    "WHERE datname = current_database() AND backend_type = 'client backend' "
                    "AND pid <> pg_backend_pid()"
                )
            ).scalars()
        )


def test_every_connection_of_make_run_names_its_process_and_metrics_stay_in_its_data_dir(engine, tmp_path):
    data_dir = tmp_path / "data"
    # the metrics folder of another `ledgerflow dev` of this checkout (the default data folder, .data):
    # this one, with its own LEDGERFLOW_DATA_DIR, must leave it alone (it emptied it before)
    other = ROOT / ".data" / "prometheus-multiproc"
    other.mkdir(parents=True, exist_ok=True)
    sentinel = other / f"lf-test-sentinel-{uuid.uuid4().hex}"
    sentinel.write_bytes(b"another server's metrics")
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PORT": str(port),
        "LEDGERFLOW_DATA_DIR": str(data_dir),
        "LOG_LEVEL": "INFO",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "dev.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ledgerflow.cli", "dev"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    try:

        def ready() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, timeout=90)
        # each process has opened its connections once it has done its first pass / request
        httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
        wait_for(lambda: PROCESSES <= set(_names(engine)), timeout=90)
        names = _names(engine)
        assert "" not in names, names
        assert all(n.startswith("ledgerflow-") for n in names), names
        assert proc.poll() is None, log.read_text()  # every process still up (a pool whose loop died exits)
        metrics = data_dir / "prometheus-multiproc"
        assert metrics.is_dir() and any(metrics.iterdir()), log.read_text()
        assert sentinel.read_bytes() == b"another server's metrics"
    finally:
        sentinel.unlink(missing_ok=True)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
