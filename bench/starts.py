"""Workflow starts per second through the real web process, beside a bare Flask JSON
endpoint on the same gunicorn settings (the Procfile's: ``gunicorn.conf.py``, gevent, 2 workers) and the same client
(the SDK's ``Client``, ``request("POST", "/v1/workflows", body=...)``: what ``start_workflow`` sends).

    PYTHONPATH=. .venv/bin/ledgerflow env -- .venv/bin/python -m bench.starts [--seconds 8] [--clients 1,2,8]
        [--workers 2]

Prints, per concurrency: starts/s, p50 / p99 latency, the CPU per start of gunicorn, PostgreSQL and the
load client, and the bare endpoint's requests/s and CPU per request. ``--workers`` sets both servers'
gunicorn workers (the Procfile's 2 by default). Numbers, not assertions; run it on a quiet machine."""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import create_engine

from app.auth import Scope, create_credential, principals
from app.db import transaction
from app.sql import COMMIT
from bench.run import children, closed_port, cpu_seconds, loadavg, postgres_cpu_seconds, scratch_database
from ledgerflow.client import Client

ROOT = Path(__file__).resolve().parent.parent
BARE_APP = """
from flask import Flask, jsonify, request
app = Flask(__name__)
@app.post("/v1/workflows")
def start():
    body = request.get_json()
    return jsonify({"request_id": "r", "data": {"instance": {"id": "x", "input": body}}}), 201
"""
DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 3600,
    "steps": [{"key": "t", "kind": "TASK", "queue": "bench.q"}],
}


def gunicorn(app: str, port: int, env: dict[str, str], cwd: Path, workers: int = 2) -> subprocess.Popen:
    # the Procfile's settings: gunicorn.conf.py (gevent), 2 workers
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "--config",
        str(ROOT / "gunicorn.conf.py"),
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--no-control-socket",
        "--log-level",
        "warning",
        app,
    ]
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=0.5)
            return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{app} did not start")


def load(
    url: str, headers: dict[str, str], body: dict, clients: int, seconds: float
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    base, path = url.split("/v1/", 1)
    token = headers.get("Authorization", "Bearer -").removeprefix("Bearer ")

    def run() -> None:
        # the SDK's Client, as a program that starts workflows sends them (an error answer raises)
        with Client(base, token, timeout=30, retries=0) as c:
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                c.request("POST", "/v1/" + path, body=body)
                took = time.perf_counter() - t0
                with lock:
                    latencies.append(took)

    threads = [threading.Thread(target=run) for _ in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies) / (time.monotonic() - started), sorted(latencies)


class CpuSplit:
    """CPU seconds used between ``start()`` and ``stop()`` by the web server (gunicorn's master and
    workers), by PostgreSQL (every ``postgres`` process of the machine: run it quiet) and by this
    load client."""

    def __init__(self, server: subprocess.Popen) -> None:
        self.server = server

    def _now(self) -> tuple[float, float, float]:
        web = sum(cpu_seconds(p) for p in children(self.server.pid))
        return web, postgres_cpu_seconds(), cpu_seconds(os.getpid())

    def start(self) -> None:
        self.before = self._now()

    def stop(self, requests: int) -> str:
        after = self._now()
        web, pg, client = ((a - b) * 1000 / max(requests, 1) for a, b in zip(after, self.before, strict=True))
        return f"{web:.2f} / {pg:.2f} / {client:.2f}"


def statements_per_start(url: str, token: str, body: dict) -> int:
    """SQL statements of one start in steady state (authentication included: the token kept by the
    process once its LISTEN connection hears credential changes, ``app.principal_cache.PrincipalCache``; the
    definition version already cached), counted in-process as the psycopg cursor executions they are:
    those of ``app.sql.run``, the commit batch (``app.sql.at_commit``) and SQLAlchemy's own (transaction
    control, BEGIN and COMMIT, is not a statement here, as before)."""
    import psycopg

    os.environ["DATABASE_URL"] = url
    from app.settings import get_settings
    from web import create_app

    get_settings.cache_clear()
    client = create_app().test_client()
    deadline = time.monotonic() + 10
    for _ in range(2):  # the first starts the listener; the second, once it hears, keeps the token
        warm = client.post(
            "/v1/workflows",
            json=body,
            headers={"Authorization": f"Bearer {token}", "Idempotency-Key": uuid.uuid4().hex},
        )
        assert warm.status_code == 201, warm.get_data(as_text=True)  # the version is cached from now on
        while not principals.hears(get_settings().database_url) and time.monotonic() < deadline:
            time.sleep(0.05)
    seen: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self, query, *args, **kwargs):
        if query != COMMIT:  # a transaction command, pipelined with the last statements: not counted
            seen.append(str(query)[:60])
        return execute(self, query, *args, **kwargs)

    psycopg.Cursor.execute = counted  # type: ignore[method-assign]
    try:
        h = {"Authorization": f"Bearer {token}", "Idempotency-Key": uuid.uuid4().hex}
        r = client.post("/v1/workflows", json=body, headers=h)
        assert r.status_code == 201, r.get_data(as_text=True)
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    return len(seen)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.starts")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--clients", default="1,2,8")
    p.add_argument(
        "--workers",
        type=int,
        default=2,
        help="gunicorn workers of both servers (the Procfile's: 2); vary it to see starts grow with web processes",
    )
    args = p.parse_args()
    with scratch_database("lf_bench_starts") as url_s:
        engine = create_engine(url_s)
        ns = "bench-" + uuid.uuid4().hex[:6]
        with transaction(engine) as conn:
            token = create_credential(
                conn,
                namespace=ns,
                name="bench",
                scopes=[
                    Scope.DEFINITIONS_PUBLISH,
                    Scope.WORKFLOWS_START,
                    Scope.TASKS_SUBMIT,
                    Scope.WORKFLOWS_READ,
                    Scope.DEFINITIONS_READ,
                ],
            ).token
        env = {
            **os.environ,
            "DATABASE_URL": url_s.replace("+psycopg", ""),
            "PYTHONPATH": str(ROOT),
            "LOG_LEVEL": "WARNING",
            "LEDGERFLOW_METRICS": "0",
            # one credential drives every start: its rate limit (100/s by default) would cap the run
            "LEDGERFLOW_RATE_LIMIT": "100000/second",
        }
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        env.pop("REDIS_URL", None)  # hints are not what is measured here
        port, bare_port = closed_port(), closed_port()
        tmp = Path(tempfile.mkdtemp())
        (tmp / "bare.py").write_text(BARE_APP)
        procs = [
            gunicorn("web:create_app()", port, env, ROOT, args.workers),
            gunicorn("bare:app", bare_port, env, tmp, args.workers),
        ]
        try:
            h = {"Authorization": f"Bearer {token}"}
            base = f"http://127.0.0.1:{port}"
            d = httpx.post(
                f"{base}/v1/workflow-definitions",
                json={"name": "bench"},
                headers={**h, "Idempotency-Key": uuid.uuid4().hex},
            ).json()["data"]
            def_id = d["definition"]["id"] if "definition" in d else d["id"]
            httpx.post(
                f"{base}/v1/workflow-definitions/{def_id}/versions",
                json=DOC,
                headers={**h, "Idempotency-Key": uuid.uuid4().hex},
            ).raise_for_status()
            body = {"definition_id": def_id, "version": "v1", "input": {"n": 1}}
            print(f"load average at start: {loadavg()}")
            print(
                f"SQL statements per start (authentication included): {statements_per_start(env['DATABASE_URL'], token, body)}"
            )
            print("CPU ms per request: web (gunicorn) / PostgreSQL / load client")
            print(
                "| clients | starts/s | p50 ms | p99 ms | CPU ms per start | bare Flask req/s | CPU ms per bare request | ratio |"
            )
            print("|---|---|---|---|---|---|---|---|")
            split, bare_split = CpuSplit(procs[0]), CpuSplit(procs[1])
            for c in (int(x) for x in args.clients.split(",")):
                split.start()
                rate, lat = load(f"{base}/v1/workflows", h, body, c, args.seconds)
                cpu = split.stop(len(lat))
                bare_split.start()
                bare, bare_lat = load(f"http://127.0.0.1:{bare_port}/v1/workflows", {}, body, c, args.seconds)
                bare_cpu = bare_split.stop(len(bare_lat))
                p99 = statistics.quantiles(lat, n=100)[98] if len(lat) > 1 else lat[0]
                print(
                    f"| {c} | {rate:.0f} | {statistics.median(lat) * 1000:.1f} | {p99 * 1000:.1f} | {cpu} | {bare:.0f} | "
                    f"{bare_cpu} | {rate / bare:.0%} |"
                )
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(20)
            engine.dispose()
            # the in-process app's LISTEN connection (``statements_per_start``) ends with the database
            logging.getLogger("web.listener").setLevel(logging.ERROR)


if __name__ == "__main__":
    main()
