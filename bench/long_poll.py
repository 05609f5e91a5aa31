"""Does the API stay responsive while long-poll claims wait?

Starts the Procfile's ``web`` command (``gunicorn --config gunicorn.conf.py``, 2 workers, gevent) on a
local port over a fresh database, parks ``--claims`` (default 32) task claims with
``wait_seconds=30`` on empty queues (4 worker credentials, 8 each: the per-credential cap), and while
they wait reads ``GET /v1/workflows/{id}`` every 50 ms for ``--seconds`` (default 25). Prints the read
latency percentiles. ``--compare-gthread`` runs the same load against the previous serving model
(``--worker-class gthread --workers 2 --threads 4``) for comparison.

    DATABASE_URL=postgresql://user@host/anydb REDIS_URL=redis://host:6379/0 \\
        PYTHONPATH=. .venv/bin/python -m bench.long_poll [--port 5990] [--compare-gthread]

Numbers are printed, never asserted (the test suite only checks that the read answers).
"""

from __future__ import annotations

import argparse
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
from sqlalchemy import create_engine, make_url, text

ROOT = Path(__file__).resolve().parent.parent
DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 3600,
    "steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}],
}


def _server_url() -> str:
    from app.settings import normalize_database_url

    return normalize_database_url(os.environ["DATABASE_URL"])


def _database() -> str:
    server = make_url(_server_url())
    name = "lf_bench_i9_" + uuid.uuid4().hex[:8]
    admin = create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return server.set(database=name).render_as_string(hide_password=False)


def _drop(url: str) -> None:
    server = make_url(url)
    admin = create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{server.database}" WITH (FORCE)'))
    admin.dispose()


def _serve(args: list[str], port: int, env: dict[str, str]) -> subprocess.Popen:
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    proc = subprocess.Popen(
        [gunicorn, *args, "--bind", f"127.0.0.1:{port}", "--no-control-socket", "web:create_app()"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the web process did not start")


def run(label: str, serve_args: list[str], port: int, claims: int, seconds: float) -> None:
    from app.auth import Scope, create_credential
    from app.db import transaction
    from ledgerflow.client import Client

    with tempfile.TemporaryDirectory() as prom:
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": prom}
        proc = _serve(serve_args, port, env)
        url = f"http://127.0.0.1:{port}"
        try:
            ns = "bench-" + uuid.uuid4().hex[:6]
            with transaction() as conn:
                admin = create_credential(
                    conn,
                    namespace=ns,
                    name="admin",
                    scopes=sorted(
                        [
                            Scope.DEFINITIONS_PUBLISH,
                            Scope.DEFINITIONS_READ,
                            Scope.WORKFLOWS_START,
                            Scope.WORKFLOWS_READ,
                        ]
                    ),
                )
                workers = [
                    create_credential(conn, namespace=ns, name=f"w{i}", scopes=[Scope.TASKS_WORK]).token
                    for i in range(max(1, claims // 8))
                ]
            client = Client(url, admin.token)
            d = client.create_definition("bench-" + uuid.uuid4().hex[:6])
            client.publish_version(d["id"], DOC)
            wid = client.start_workflow(d["id"], "v1", {}).instance.id
            statuses: list[int] = []

            def claim(i: int) -> None:
                r = httpx.post(
                    url + "/v1/tasks/claim",
                    json={"queues": [f"idle-{i}"], "wait_seconds": 30, "max_tasks": 1},
                    headers={
                        "Authorization": f"Bearer {workers[i % len(workers)]}",
                        "Idempotency-Key": uuid.uuid4().hex,
                    },
                    timeout=90,
                )
                statuses.append(r.status_code)

            threads = [threading.Thread(target=claim, args=(i,)) for i in range(claims)]
            for t in threads:
                t.start()
            time.sleep(2.0)  # every claim is parked
            latencies: list[float] = []
            errors = 0
            headers = {"Authorization": f"Bearer {admin.token}"}
            with httpx.Client(timeout=30) as http:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    started = time.perf_counter()
                    try:
                        ok = http.get(f"{url}/v1/workflows/{wid}", headers=headers).status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    latencies.append((time.perf_counter() - started) * 1000)
                    errors += not ok
                    time.sleep(0.05)
            for t in threads:
                t.join()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if len(latencies) < 2:
        print(
            f"{label:<34} claims={claims}: the read did not answer while the claims waited "
            f"({len(latencies)} read(s), {latencies[0] if latencies else 0:.0f} ms)"
        )
        return
    q = statistics.quantiles(latencies, n=100)
    print(
        f"{label:<34} claims={claims} waiting reads={len(latencies)} errors={errors} "
        f"p50={q[49]:.1f} ms p95={q[94]:.1f} ms p99={q[98]:.1f} ms max={max(latencies):.1f} ms "
        f"claim answers={sorted(set(statuses))}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=5990)
    parser.add_argument("--claims", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--compare-gthread", action="store_true")
    args = parser.parse_args()
    url = _database()
    os.environ["DATABASE_URL"] = url
    try:
        from app.migrate import upgrade
        from app.settings import get_settings

        upgrade(get_settings().database_url)
        run(
            "gevent (gunicorn.conf.py, 2 workers)",
            ["--config", "gunicorn.conf.py", "--workers", "2"],
            args.port,
            args.claims,
            args.seconds,
        )
        if args.compare_gthread:
            run(
                "gthread (2 workers x 4 threads)",
                [
                    "--config",
                    "python:web.gunicorn_conf",
                    "--workers",
                    "2",
                    "--worker-class",
                    "gthread",
                    "--threads",
                    "4",
                ],
                args.port + 1,
                args.claims,
                args.seconds,
            )
    finally:
        from app.db import get_engine

        get_engine().dispose()
        _drop(url)


if __name__ == "__main__":
    main()
