"""The client's CPU per HTTP request, by HTTP library: what the SDK's transport costs the machine that runs
a task worker, apart from the server's work.

    PYTHONPATH=. .venv/bin/python -m bench.http_client [--n 1000] [--rounds 5]

A bare Flask endpoint (``bench.starts.BARE_APP``: parse a JSON body, answer a small JSON document) under the
Procfile's gunicorn settings (``gunicorn.conf.py``, gevent, 1 worker), and one client thread sending the
same POST (a JSON body, an Authorization and an Idempotency-Key header, the answer's JSON parsed) over one
kept-alive connection, through:

- ``httpx``: ``httpx.Client()`` with its defaults;
- ``sdk``: ``ledgerflow.client.Client.request`` as a user calls it (the body's JSON, the answer's, the
  retry loop), over the SDK's own kept-alive connections (``ledgerflow.wire``, its default);
- ``sdk over httpx``: the same call through an httpx transport given to ``Client`` (as with a proxy);
- ``http.client``: the standard library's ``HTTPConnection``, bare.

``DATABASE_URL`` is only read by ``gunicorn.conf.py``'s settings (never connected to). Prints this thread's
CPU per request (``time.thread_time``: no wait for the server counted) for each
library, ``--rounds`` times alternating, and the minimum. No database, no Redis. Numbers, not assertions."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.run import closed_port
from bench.starts import BARE_APP, ROOT, gunicorn
from ledgerflow.client import Client

BODY = {"definition_id": "d" * 32, "version": "v1", "input": {"n": 1}}
TOKEN = "t" * 43
PATH = "/v1/workflows"


def senders(port: int) -> dict[str, Callable[[], None]]:
    """One request of each library to 127.0.0.1:``port`` (each keeps its connection between calls)."""
    base = f"http://127.0.0.1:{port}"
    plain = httpx.Client(base_url=base)
    sdk = Client(base, TOKEN)
    sdk_httpx = Client(base, TOKEN, transport=httpx.HTTPTransport())
    conn = http.client.HTTPConnection("127.0.0.1", port)
    auth = {"Authorization": f"Bearer {TOKEN}"}

    def via_httpx() -> None:
        plain.post(PATH, json=BODY, headers={**auth, "Idempotency-Key": uuid.uuid4().hex}).json()

    def via_sdk() -> None:
        sdk.request("POST", PATH, body=BODY)

    def via_sdk_httpx() -> None:
        sdk_httpx.request("POST", PATH, body=BODY)

    def via_stdlib() -> None:
        headers = {**auth, "Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"}
        conn.request("POST", PATH, body=json.dumps(BODY).encode(), headers=headers)
        json.loads(conn.getresponse().read())

    return {"httpx": via_httpx, "sdk": via_sdk, "sdk over httpx": via_sdk_httpx, "http.client": via_stdlib}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.http_client")
    p.add_argument("--n", type=int, default=1000, help="requests per library and round")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bare.py").write_text(BARE_APP)
        port = closed_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LOG_LEVEL": "WARNING", "LEDGERFLOW_METRICS": "0"}
        # gunicorn.conf.py reads the settings, which need a database URL; the bare app never connects
        env.setdefault("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        server = gunicorn("bare:app", port, env, Path(tmp), workers=1)
        try:
            sends = senders(port)
            cpu: dict[str, list[float]] = {name: [] for name in sends}
            for _ in range(args.rounds):
                for name, send in sends.items():
                    for _ in range(args.n // 10):  # warm: connections made, caches filled
                        send()
                    t0 = time.thread_time()
                    for _ in range(args.n):
                        send()
                    cpu[name].append((time.thread_time() - t0) / args.n * 1e6)
        finally:
            server.terminate()
            server.wait(10)
    print(f"client CPU per request (µs), {args.n} requests x {args.rounds} rounds, one kept-alive connection")
    print("| library | each round | min |\n|---|---|---|")
    for name, values in cpu.items():
        print(f"| {name} | {' / '.join(f'{v:.0f}' for v in values)} | {min(values):.0f} |")


if __name__ == "__main__":
    main()
