"""``python -m bench.webhooks``: events and signed webhooks (X-EVENT). Printed, never asserted.

1. **The outbox on the hot path**: ``POST /v1/workflows`` (the Flask app in-process: auth, schema,
   idempotency receipt, start, first activation; one TASK step) timed over many requests in three
   configurations, interleaved: events off (``app.engine.events.emit`` replaced by a no-op: the cost
   before the outbox existed), events written with nobody listening (no dispatch job), and events written with a
   subscription in the namespace (one ``event_dispatch`` job per transaction).
2. **Fan-out and delivery**: 5 subscriptions to ``workflow.started`` on a local receiver (127.0.0.1,
   opened through ``LEDGERFLOW_OUTBOUND_ALLOW``). Backlog: ``--events`` workflow starts (1 matching
   event each = events x 5 deliveries) are written first, then ``--procs`` real ``ledgerflow worker
   --pool outbound`` processes start; deliveries/s = deliveries / (first to last arrival at the
   receiver). Live: with the workers running, ``--latency-events`` more starts, one every ~50 ms;
   event->delivery latency = arrival at the receiver - the event's ``created_at`` (the database and
   the receiver share the machine's clock).

Creates and drops its own database (``lf_bench_<random>``) on the server of ``DATABASE_URL``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.run import Bench, Config, log, percentile

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 3600,
    "steps": [{"key": "work", "kind": "TASK", "queue": "bench-q"}],
}


class _Receiver(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    arrivals: dict[tuple[str, str], float] = {}
    lock = threading.Lock()

    def log_message(self, *a) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with _Receiver.lock:
            _Receiver.arrivals.setdefault((self.path, self.headers.get("webhook-id", "")), time.time())
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _receiver() -> ThreadingHTTPServer:
    for port in range(5400, 5500):
        try:
            server = ThreadingHTTPServer(("127.0.0.1", port), _Receiver)
            break
        except OSError:
            continue
    else:
        raise SystemExit("no free port in 5400-5499")
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _setup_namespace(client, subscribe_url: str | None, n_subs: int) -> tuple[dict, str]:
    from app.auth import ALL_SCOPES, create_credential
    from app.db import transaction

    with transaction() as conn:
        token = create_credential(
            conn, namespace="b-" + uuid.uuid4().hex[:8], name="bench", scopes=sorted(ALL_SCOPES)
        ).token
    h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(path: str, body: dict) -> dict:
        r = client.post(path, json=body, headers={**h, "Idempotency-Key": uuid.uuid4().hex})
        assert r.status_code < 300, r.get_json()
        return r.get_json()["data"]

    def_id = post("/v1/workflow-definitions", {"name": "bench-" + uuid.uuid4().hex[:6]})["definition"]["id"]
    post(f"/v1/workflow-definitions/{def_id}/versions", DOC)
    for i in range(n_subs if subscribe_url else 0):
        post("/v1/event-subscriptions", {"url": f"{subscribe_url}/s{i}", "event_types": ["workflow.started"]})
    return h, def_id


def _start(client, h: dict, def_id: str) -> None:
    r = client.post(
        "/v1/workflows",
        json={"definition_id": def_id, "version": "v1", "input": {}},
        headers={**h, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert r.status_code == 201, r.get_json()


def hot_path(n: int, rounds: int, receiver_url: str) -> list[str]:
    from app.engine import events
    from web import create_app

    client = create_app().test_client()
    real_emit = events.emit
    configs = {
        "events off (no outbox)": (None, lambda *a, **k: None),
        "events, nobody listening": (None, real_emit),
        "events + dispatch job (a subscription)": (receiver_url, real_emit),
    }
    setups = {name: _setup_namespace(client, url, 1) for name, (url, _) in configs.items()}
    times: dict[str, list[float]] = {k: [] for k in configs}
    for name in configs:  # warm-up
        events.emit = configs[name][1]
        for _ in range(20):
            _start(client, *setups[name])
    for _ in range(rounds):
        for name, (_, emit) in configs.items():
            events.emit = emit
            h, def_id = setups[name]
            for _ in range(n):
                t0 = time.perf_counter()
                _start(client, h, def_id)
                times[name].append((time.perf_counter() - t0) * 1000)
    events.emit = real_emit
    base = statistics.median(times["events off (no outbox)"])
    out = [
        f"POST /v1/workflows in-process, {n * rounds} requests each",
        f"{'configuration':42s} {'p50 ms':>8s} {'p99 ms':>8s} {'vs off':>8s}",
    ]
    for name, ts in times.items():
        med = statistics.median(ts)
        out.append(f"{name:42s} {med:8.2f} {percentile(ts, 99):8.2f} {med - base:+7.2f}ms")
    return out


def _wait(want: int, path_prefix: str) -> dict[tuple[str, str], float]:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        with _Receiver.lock:
            got = {k: v for k, v in _Receiver.arrivals.items() if k[0].startswith(path_prefix)}
        if len(got) >= want:
            return got
        time.sleep(0.2)
    return got


def _created(def_id: str) -> dict[str, float]:
    from sqlalchemy import text

    from app.db import get_engine

    with get_engine().connect() as conn:
        return {
            r[0]: float(r[1])
            for r in conn.execute(
                text(
                    "SELECT id, extract(epoch FROM created_at) FROM workflow_events WHERE type = 'workflow.started' "
                    "AND definition_id = :d"
                ),
                {"d": def_id},
            ).all()
        }


def delivery(
    bench: Bench, n_events: int, n_subs: int, procs: int, receiver_url: str, lat_events: int
) -> list[str]:
    from sqlalchemy import text

    from actors.hints import install_publisher
    from app.db import get_engine
    from web import create_app

    install_publisher()
    client = create_app().test_client()
    with get_engine().begin() as conn:  # the hot path's subscription and its pending fan-out are not measured
        conn.execute(text("DELETE FROM event_subscriptions"))
        conn.execute(text("DELETE FROM workflow_jobs WHERE type IN ('event_dispatch', 'webhook_delivery')"))
    h, def_id = _setup_namespace(client, receiver_url + "/backlog", n_subs)
    t0 = time.monotonic()
    for _ in range(n_events):  # the backlog: no worker runs yet
        _start(client, h, def_id)
    produce = time.monotonic() - t0
    env = {
        **bench.lf_env(bench.redis_url),
        "LEDGERFLOW_OUTBOUND_ALLOW": "127.0.0.1/32",
        "LEDGERFLOW_HANDLERS": "",
    }
    for _ in range(procs):
        bench.spawn([str(bench.bin / "ledgerflow"), "worker", "--pool", "outbound"], env, "outbound")
    got = _wait(n_events * n_subs, "/backlog")
    span = max(got.values()) - min(got.values())
    out = [
        f"{n_events} events x {n_subs} subscriptions (workflow.started), {procs} outbound proc(s) x 4 slots, "
        "local receiver",
        f"backlog (events written first, {n_events / produce:,.0f} starts/s): {len(got)} of {n_events * n_subs} "
        f"delivered, {len(got) / span:,.0f} deliveries/s (first to last arrival, {span:.1f} s)",
    ]
    # latency: workers running, events arriving one start at a time
    h2, def2 = _setup_namespace(client, receiver_url + "/live", n_subs)
    for _ in range(lat_events):
        _start(client, h2, def2)
        time.sleep(0.05)
    live = _wait(lat_events * n_subs, "/live")
    created = _created(def2)
    lat = [(t - created[wid]) * 1000 for (_, wid), t in live.items() if wid in created]
    out.append(
        f"live ({lat_events} events, one start every ~50 ms + its own time): event -> delivery latency "
        f"p50 {percentile(lat, 50):,.0f} ms, p99 {percentile(lat, 99):,.0f} ms ({len(lat)} deliveries)"
    )
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.webhooks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--events", type=int, default=1000)
    p.add_argument("--subs", type=int, default=5)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--latency-events", type=int, default=200)
    p.add_argument("--starts", type=int, default=200, help="POST /v1/workflows per configuration and round")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    if not os.environ.get("DATABASE_URL"):
        sys.exit("DATABASE_URL is not set: run through `make bench-webhooks` or export it")
    cfg = Config(
        quick=True,
        jobs=0,
        procs=[a.procs],
        repeat=1,
        lat_n=0,
        lat_rate=1.0,
        claim_sizes=[],
        claim_samples=0,
        peer=False,
        workloads=set(),
    )
    bench = Bench(cfg)
    server = _receiver()
    url = f"http://127.0.0.1:{server.server_port}"
    os.environ["LEDGERFLOW_OUTBOUND_ALLOW"] = "127.0.0.1/32"
    lines = ["events and webhooks (printed, not asserted)", ""]
    try:
        bench.setup()
        log("hot path: POST /v1/workflows")
        lines += hot_path(a.starts, a.rounds, url) + [""]
        log(f"delivery: {a.events} events x {a.subs} subscriptions")
        lines += delivery(bench, a.events, a.subs, a.procs, url, a.latency_events)
    finally:
        bench.teardown()
        server.shutdown()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
