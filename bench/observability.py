"""``python -m bench.observability``: the cost of metrics and tracing on no-op throughput.

Two measurements, printed, never asserted (see bench/README.md, "Observability overhead"):

1. **Hook cost per job** (in a subprocess, so the prometheus-client mode is chosen at import as in a
   worker): the instrument calls one job makes on its way through the ledger (enqueued, claimed +
   queue wait, attempt duration, settled), timed over many iterations, with metrics off, in-process
   and in multiprocess mode (PROMETHEUS_MULTIPROC_DIR), and the attempt span + log binding of the
   pool with tracing on (in-memory no-op exporter). Reported in microseconds per job and as a share
   of the per-job time of one worker process at ~1,300 jobs/s (770 us).
2. **No-op throughput** of one real ``ledgerflow worker --pool advance`` process (4 slots) on the same
   workload as ``python -m bench --only throughput`` (jobs inserted in one transaction, rate = settled
   attempts / (last finish - first start) by database time), in three configurations, interleaved and
   repeated: baseline (``LEDGERFLOW_METRICS=0``, tracing off); metrics on in multiprocess mode; metrics
   plus tracing exporting every attempt span over OTLP/HTTP to a local sink on 127.0.0.1.

Creates and drops its own database (``lf_bench_<random>``) on the server of ``DATABASE_URL``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.run import ROOT, Bench, Config, loadavg, log

PER_JOB_BUDGET_US = 1e6 / 1300  # one worker process at ~1,300 no-op jobs/s

HOOKS = r"""
import os, sys, time
from types import SimpleNamespace
n = int(sys.argv[1])
from app.observability import logs, metrics, tracing
if sys.argv[2] == "tracing":
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    class Drop(SpanExporter):
        def export(self, spans): return SpanExportResult.SUCCESS
    tracing.setup("bench", exporter=Drop(), set_global=False)
counts = {("delay_wake", "advance"): 1}
ctx = SimpleNamespace(job_id=1, type="delay_wake", queue="workflow-ledger", attempt=1, generation=1,
                      trace_id="0af7651916cd43dd8448eb211c80319c", instance_id=None, attempt_id=7,
                      traceparent=None)
t0 = time.perf_counter()
for _ in range(n):
    metrics.jobs_enqueued(counts)
    metrics.job_claimed("delay_wake", "advance", 0.004)
    with logs.bind_job(ctx):
        if tracing.ENABLED:
            with tracing.attempt_span(ctx) as span:
                metrics.attempt_finished("delay_wake", 0.001)
                tracing.end_attempt(span, "succeeded", None)
        else:
            metrics.attempt_finished("delay_wake", 0.001)
    metrics.job_settled("delay_wake", "advance", "succeeded")
print((time.perf_counter() - t0) / n * 1e6)
"""


def hook_cost(mode: str, n: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env["LEDGERFLOW_METRICS"] = "0" if mode == "off" else "1"
    with tempfile.TemporaryDirectory(prefix="lf-bench-prom-") as d:
        if mode in ("multiprocess", "tracing"):
            env["PROMETHEUS_MULTIPROC_DIR"] = d
        out = subprocess.run(
            [sys.executable, "-c", HOOKS, str(n), mode],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    return float(out.stdout.strip().splitlines()[-1])


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that accepts and drops every export."""

    received = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _Sink.received += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def start_sink() -> ThreadingHTTPServer:
    for port in range(5200, 5300):
        try:
            server = ThreadingHTTPServer(("127.0.0.1", port), _Sink)
        except OSError:
            continue
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server
    raise RuntimeError("no free port in 5200-5299 for the OTLP sink")


class ObsBench(Bench):
    extra_env: dict[str, str] = {}

    def lf_env(self, redis_url: str | None) -> dict[str, str]:
        env = super().lf_env(redis_url)
        for k in (
            "PROMETHEUS_MULTIPROC_DIR",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_TRACES_EXPORTER",
            "LEDGERFLOW_METRICS",
        ):
            env.pop(k, None)
        env.update(self.extra_env)
        return env


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.observability",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=3000, help="jobs per throughput run")
    p.add_argument("--repeat", type=int, default=3, help="interleaved runs per configuration")
    p.add_argument("--hook-iterations", type=int, default=50_000)
    p.add_argument("--no-throughput", action="store_true", help="only the per-job hook cost")
    a = p.parse_args(argv)
    if not os.environ.get("DATABASE_URL") and not a.no_throughput:
        sys.exit("DATABASE_URL is not set: run through `make bench BENCH_ARGS=...` or export it")

    lines = ["observability overhead (printed, not asserted)", ""]
    log("hook cost per job")
    costs = {m: hook_cost(m, a.hook_iterations) for m in ("off", "in-process", "multiprocess", "tracing")}
    lines.append(f"{'hooks of one job':42s} {'us/job':>8s} {'share of 770 us':>16s}")
    for m, us in costs.items():
        label = {
            "off": "metrics off",
            "in-process": "metrics, in-process registry",
            "multiprocess": "metrics, multiprocess mode",
            "tracing": "metrics (multiprocess) + attempt span",
        }[m]
        lines.append(f"{label:42s} {us:8.2f} {us / PER_JOB_BUDGET_US:15.2%}")
    lines.append("")

    if not a.no_throughput:
        sink = start_sink()
        prom = Path(tempfile.mkdtemp(prefix="lf-bench-prom-"))
        configs = {
            "baseline (metrics off, tracing off)": {"LEDGERFLOW_METRICS": "0"},
            "metrics (multiprocess)": {"LEDGERFLOW_METRICS": "1", "PROMETHEUS_MULTIPROC_DIR": str(prom)},
            "metrics + tracing (OTLP to local sink)": {
                "LEDGERFLOW_METRICS": "1",
                "PROMETHEUS_MULTIPROC_DIR": str(prom),
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_port}",
                "OTEL_SERVICE_NAME": "ledgerflow-bench",
            },
        }
        cfg = Config(
            quick=True,
            jobs=a.jobs,
            procs=[1],
            repeat=1,
            lat_n=0,
            lat_rate=1.0,
            claim_sizes=[],
            claim_samples=0,
            peer=False,
            workloads=set(),
        )
        bench = ObsBench(cfg)
        rates: dict[str, list[float]] = {k: [] for k in configs}
        loads: list[str] = []
        try:
            bench.setup()
            for rep in range(a.repeat):
                for name, env in configs.items():
                    bench.extra_env = env
                    log(f"throughput {name}, {a.jobs} no-op jobs, 1 process (run {rep + 1})")
                    rate = bench.lf_throughput(1)
                    rates[name].append(rate)
                    loads.append(loadavg())
                    log(f"  -> {rate:,.0f} jobs/s")
        finally:
            bench.teardown()
            sink.shutdown()
        base = max(rates["baseline (metrics off, tracing off)"])
        lines.append(
            f"{'no-op throughput, 1 proc x 4 slots':42s} {'best':>8s} {'median':>8s} {'vs base':>8s}  runs"
        )
        for name, rs in rates.items():
            best = max(rs)
            lines.append(
                f"{name:42s} {best:8,.0f} {statistics.median(rs):8,.0f} {best / base - 1:+8.1%}  "
                + " ".join(f"{r:,.0f}" for r in rs)
            )
        spread = [(max(rs) - min(rs)) / max(rs) for rs in rates.values() if len(rs) > 1]
        if spread:
            lines.append(
                f"noise: runs of one configuration differ by up to {max(spread):.0%} (max-min / max)"
            )
        lines.append(f"OTLP export requests received by the sink: {_Sink.received}")
        lines.append("load average during the runs: " + "; ".join(loads))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
