"""``python -m bench.workflows``: workflows end to end, Ledgerflow beside DBOS and Absurd.

    python -m bench.workflows [--shape all|task-task,task-timer-task,chain10,fanout,mapping] [--n 300]
        [--engines ledgerflow,dbos,absurd] [--no-rate-limit] [--dbos-client] [--warmup 100] [--probe 10]
        [--rate 50] [--rounds 3]
    python -m bench.workflows --counts-only --shape task-timer-task --n 20    # Ledgerflow's writes, fast

Each engine runs each shape against its own scratch database on the server named by DATABASE_URL, in
a child process of its own (``--child``), N workflows started from 4 client threads (as fast as they
go, or ``--rate R`` workflows a second offered by them together: the same load for every engine); see
``bench/wf_ledgerflow.py`` and ``bench/wf_peers.py`` for how each engine is run, and
``bench/wf_common.py`` for how database work is counted. Prints, per shape and engine: workflows/s,
start call p50/p99, workflow latency (start call -> done, by the engine's own completion time)
p50/p99, timer lateness p50/p99, row writes and transactions per workflow; then each further TASK
step ((chain10 - task-task) / 8), Ledgerflow's writes per table, and Ledgerflow's idle probe (the step
hop, timer lateness, latency of workflows run one at a time). Numbers only, never asserted.

The ``fanout`` shape (TASK -> 100 elements, one task each, over the array the first task outputs ->
TASK) runs N / 10 workflows (at least 2) and prints elements/s and row writes / transactions per
element (the workflow's, both tasks included, / 100) too. Each engine in its own idiom: Ledgerflow a
``for_each`` step (``max_parallel`` 100), DBOS a workflow that enqueues the 100 element steps on a
queue and awaits their handles, Absurd a task that spawns the 100 elements on another queue and
awaits their results; the elements run 4 at once in every engine (see wf_ledgerflow / wf_peers).

``--rounds K`` runs every shape K times, the engines in the order given and then reversed, round after
round, so that each engine's run has the others' just before and after it; the table shows each engine's
median round (by workflows/s) and, below it, every round's workflows/s and Ledgerflow's against each peer in
the same round (a 2-core machine's speed drifts over minutes: one round of each engine can differ by a
quarter from the next, where the paired ratios of alternated rounds move less).

``--counts-only`` runs Ledgerflow alone, in this process, without the probe and without peers, and
prints its row writes per table and transactions per workflow (about 40 s for one shape).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import wf_common
from bench.run import ROOT, loadavg, log
from bench.wf_common import (
    FANOUT_PARALLEL,
    SHAPES,
    PerWorkflow,
    RunResult,
    Shape,
    counts_table,
    further_step,
    p,
    parse_shapes,
)

# engine variants (columns), in report order
VARIANTS = {
    "ledgerflow": "Ledgerflow",
    "ledgerflow-nolimit": "LF no limit",
    "dbos": "DBOS start_wf",
    "dbos-client": "DBOS client",
    "dbos-nolimit": "DBOS no limit",  # the fanout shape only: its element queue at DBOS's defaults
    "absurd": "Absurd",
}
MAX_ROUNDS = 9  # --rounds: each round of --shape all is ~6 minutes on 2 cores
CHAIN_EXTRA = SHAPES["chain10"].tasks - SHAPES["task-task"].tasks  # 8 further TASK steps
FANOUT_N_DIVISOR = 10  # a fan-out workflow runs 100 tasks: N / 10 of them (30 at the default N)


def shape_n(shape: Shape, n: int) -> int:
    """Workflows of ``shape`` in a run of ``--n`` (the fan-out shape: ``n / FANOUT_N_DIVISOR``, at
    least 2, so that a run holds about as many tasks as chain10's)."""
    return max(2, -(-n // FANOUT_N_DIVISOR)) if shape.fanout else n


def shape_warmup(shape: Shape, warmup: int) -> int:
    return min(warmup, 2) if shape.fanout else warmup


def run_variant(variant: str, shape: Shape, n: int, warmup: int, probe: int) -> RunResult:
    """One engine variant on one shape, in this process."""
    if variant in ("ledgerflow", "ledgerflow-nolimit"):
        from bench.wf_ledgerflow import run_ledgerflow

        limited = variant == "ledgerflow"
        return run_ledgerflow(
            shape, n, warmup=warmup, probe=probe if limited else 0, rate_limit=limited, label=variant
        )
    from bench import wf_peers  # the bench extra: dbos, absurd-sdk

    if variant in ("dbos", "dbos-client", "dbos-nolimit"):
        return wf_peers.run_dbos(
            shape, n, warmup=warmup, client=variant == "dbos-client", element_limit=variant != "dbos-nolimit"
        )
    if variant == "absurd":
        return wf_peers.run_absurd(shape, n, warmup=warmup)
    raise ValueError(f"unknown engine {variant!r}")


def run_child(variant: str, shape: Shape, a: argparse.Namespace, out_dir: Path) -> RunResult:
    """``run_variant`` in a fresh child process (no state carried between engines: DBOS's singleton,
    threads, caches); its result comes back as JSON."""
    path = out_dir / f"{variant}-{shape.name}.json"
    argv = [
        sys.executable,
        "-m",
        "bench.workflows",
        "--child",
        variant,
        "--shape",
        shape.name,
        "--n",
        str(shape_n(shape, a.n)),
        "--warmup",
        str(shape_warmup(shape, a.warmup)),
        "--probe",
        str(a.probe),
        *(["--rate", str(a.rate)] if a.rate else []),
        *(["--payload-bytes", str(a.payload_bytes)] if a.payload_bytes else []),
        "--result",
        str(path),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), env.get("PYTHONPATH", "")) if x)
    done = subprocess.run(argv, env=env, cwd=ROOT, check=False, timeout=3600)
    if done.returncode != 0 or not path.exists():
        res = RunResult(engine=variant, shape=shape.name, n=shape_n(shape, a.n))
        res.notes.append(f"the run failed (exit {done.returncode}): see the log above")
        return res
    return RunResult.from_json(json.loads(path.read_text()))


def round_order(variants: Sequence[str], i: int) -> list[str]:
    """The engines' order in round ``i`` (from 0): as given, then reversed, alternately."""
    return list(variants) if i % 2 == 0 else list(reversed(variants))


def median_round(runs: Sequence[RunResult]) -> RunResult:
    """The round of an engine whose workflows/s is the median (the lower middle of an even number of rounds);
    a failed round (no wall time) only when every round failed."""
    done = sorted((r for r in runs if r.wall), key=lambda r: r.rate)
    return done[(len(done) - 1) // 2] if done else runs[0]


def rounds_lines(shape: Shape, rounds: dict[str, list[RunResult]]) -> list[str]:
    """Every round of a shape: each engine's workflows/s (and Ledgerflow's timer lateness p50 / p99), and
    Ledgerflow's workflows/s against each peer's of the same round, with their median."""
    cols = [v for v in VARIANTS if v in rounds]
    k = max((len(runs) for runs in rounds.values()), default=0)
    lines = [f"  {k} rounds (engines alternated), workflows/s of each round:"]
    for v in cols:
        lines.append(
            f"    {VARIANTS[v]:<32}" + ", ".join(f"{r.rate:,.1f}" if r.wall else "-" for r in rounds[v])
        )
    lf = rounds.get("ledgerflow", [])
    if shape.timer and lf:
        lines.append(
            f"    {'Ledgerflow timer p50 / p99 (ms)':<32}" + ", ".join(_lat(r.timer_late_ms) for r in lf)
        )
    for v in cols:
        if v == "ledgerflow" or not lf:
            continue
        paired = [a.rate / b.rate for a, b in zip(lf, rounds[v], strict=False) if a.wall and b.wall]
        if paired:
            mid = sorted(paired)[(len(paired) - 1) // 2]
            lines.append(
                f"    Ledgerflow against {VARIANTS[v]}, round by round: "
                + ", ".join(f"{x:.2f}x" for x in paired)
                + f" (median {mid:.2f}x, lowest {min(paired):.2f}x)"
            )
    return lines


# -------------------------------------------------------------------------------------------- report
def _q(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    if not values:
        return "-"
    return f"{fmt.format(p(values, 50))} / {fmt.format(p(values, 99))}"


def _lat(values: Sequence[float]) -> str:
    """p50 / p99 in ms, with one decimal below 100 ms."""
    if not values:
        return "-"
    fmt = "{:,.1f}" if p(values, 99) < 100 else "{:,.0f}"
    return _q(values, fmt)


_CPU_PARTS = ("postgres", "engine", "client")


def _cpu_text(c: dict[str, float]) -> str:
    """PostgreSQL (the engine database's backends) + the engine's own processes + this bench process."""
    return "+".join(f"{c[k]:.1f}" for k in _CPU_PARTS) if c else "-"


def _cpu(r: RunResult) -> str:
    return _cpu_text(r.cpu_ms)


def further_cpu(long: dict[str, float], short: dict[str, float], extra_steps: int) -> str:
    """A further TASK step's CPU, written as a workflow's: ``(long - short) / extra_steps`` for each part."""
    if not long or not short:
        return "-"
    return _cpu_text({k: (long[k] - short[k]) / max(extra_steps, 1) for k in _CPU_PARTS})


def shape_block(shape: Shape, results: dict[str, RunResult]) -> list[str]:
    cols = [v for v in VARIANTS if v in results]
    row = "  {:<38}" + " {:>15}" * len(cols)
    names = {"timer": "TIMER 1 s", "fanout": f"{shape.fanout} x TASK (fan-out)"}
    lines = [f"{shape.name} ({' -> '.join(names.get(k, 'TASK') for k, _ in shape.plan())})"]
    lines.append(row.format("", *(VARIANTS[c] for c in cols)))
    lines.append("  " + "-" * (38 + 16 * len(cols)))

    def add(label: str, cell) -> None:
        lines.append(row.format(label, *(cell(results[c]) for c in cols)))

    add("workflows/s", lambda r: f"{r.rate:,.1f}" if r.wall else "-")
    if shape.fanout:
        add("elements/s", lambda r: f"{r.rate * shape.fanout:,.0f}" if r.wall else "-")
    add("start call p50 / p99 (ms)", lambda r: _lat(r.start_ms))
    add("workflow latency p50 / p99 (ms)", lambda r: _lat(r.latency_ms))
    if shape.timer:
        add("timer lateness p50 / p99 (ms)", lambda r: _lat(r.timer_late_ms))

    def per(r: RunResult) -> PerWorkflow | None:
        return r.per_workflow()

    add(
        "row writes / workflow (ins+upd)",
        lambda r: f"{w.writes:.1f} ({w.inserts:.1f}+{w.updates:.1f})" if (w := per(r)) else "-",
    )
    if any((w := per(r)) and w.deletes >= 0.05 for r in results.values()):
        add("row deletes / workflow", lambda r: f"{w.deletes:.1f}" if (w := per(r)) else "-")
    add("transactions / workflow", lambda r: f"{w.xacts:.1f}" if (w := per(r)) else "-")
    # the server's WAL position at both ends of the window: the engine's own when it runs alone (the engines
    # run one after the other), with autovacuum's and checkpoints' full-page images (a count with noise)
    add("WAL written / workflow (kB)", lambda r: f"{w.wal / 1000:,.1f}" if (w := per(r)) and w.wal else "-")
    if shape.fanout:
        add(
            "row writes / element (all / elements)",
            lambda r: f"{w.writes / shape.fanout:.2f}" if (w := per(r)) else "-",
        )
        add(
            "transactions / element (all / elements)",
            lambda r: f"{w.xacts / shape.fanout:.2f}" if (w := per(r)) else "-",
        )
    add(
        "bytes on disk / workflow (kB)",
        lambda r: f"{r.bytes_per_workflow / 1000:,.1f}" if r.bytes_per_workflow is not None else "-",
    )
    add(
        "bytes in use after VACUUM / wf (kB)",
        lambda r: f"{r.used_per_workflow / 1000:,.1f}" if r.used_per_workflow is not None else "-",
    )
    add("CPU ms / workflow: PG+engine+client", _cpu)
    if any(r.http_requests is not None for r in results.values()):
        add(
            "HTTP requests / workflow",
            lambda r: f"{r.http_requests / r.n:.2f}" if r.http_requests is not None and r.n else "-",
        )
    if any(r.http_429 is not None for r in results.values()):
        add(
            "429 answers (retried by the SDK)", lambda r: f"{r.http_429:,}" if r.http_429 is not None else "-"
        )
    if any(r.failed for r in results.values()):
        add("workflows not succeeded", lambda r: str(r.failed))
    add("load average at start", lambda r: r.load.split()[0] if r.load else "-")
    lf = results.get("ledgerflow")
    if lf is not None and lf.wall:
        ratios = [
            f"{lf.rate / results[c].rate:.2f}x {VARIANTS[c]}"
            for c in cols
            if c != "ledgerflow" and results[c].wall
        ]
        if ratios:
            what = "workflows/s (and elements/s)" if shape.fanout else "workflows/s"
            lines.append(f"  Ledgerflow {what} against: " + ", ".join(ratios))
    if lf is not None and lf.bytes_per_workflow:
        sizes = [
            f"{lf.bytes_per_workflow / r.bytes_per_workflow:.1f}x {VARIANTS[c]}"
            + (
                f" ({lf.used_per_workflow / r.used_per_workflow:.1f}x)"
                if lf.used_per_workflow and r.used_per_workflow
                else ""
            )
            for c in cols
            if c != "ledgerflow" and (r := results[c]).bytes_per_workflow
        ]
        if sizes:
            lines.append(
                "  Ledgerflow bytes / workflow on disk (in use after VACUUM) against: " + ", ".join(sizes)
            )
    return lines


def report(
    results: dict[str, dict[str, RunResult]],
    a: argparse.Namespace,
    rounds: dict[str, dict[str, list[RunResult]]] | None = None,
) -> str:
    """``results[shape][variant]``; with ``rounds[shape][variant]`` (``--rounds``), ``results`` holds each
    engine's median round and every round is listed below its shape."""
    lines = [
        f"Workflow benchmark (bench.workflows; {time.strftime('%Y-%m-%d %H:%M')}; {os.cpu_count()} CPUs; N = {a.n} "
        f"per shape and engine, 4 client threads{f' offering {a.rate:g} workflows/s' if a.rate else ''}, "
        f"{a.warmup} warm-up workflows not counted"
        f"{f'; inputs and task outputs padded with {a.payload_bytes:,} random characters' if a.payload_bytes else ''}"
        f"{f'; {a.rounds} rounds, each engine its median round' if rounds else ''})",
        "",
    ]
    if any(SHAPES[name].fanout for name in results):
        lines[-1:-1] = [
            f"(fanout: N / {FANOUT_N_DIVISOR} workflows, at least 2, {shape_warmup(SHAPES['fanout'], a.warmup)} "
            f"warm-up; its elements on their own queue, 4 at once in every engine; Ledgerflow's max_parallel "
            f"{FANOUT_PARALLEL})"
        ]
    for name, by_variant in results.items():
        lines += shape_block(SHAPES[name], by_variant)
        if rounds and name in rounds:
            lines += rounds_lines(SHAPES[name], rounds[name])
        lines.append("")
    # each further TASK step
    if "task-task" in results and "chain10" in results:
        cols = [v for v in VARIANTS if v in results["task-task"] and v in results["chain10"]]
        steps = {}
        for v in cols:
            long, short = results["chain10"][v].per_workflow(), results["task-task"][v].per_workflow()
            if long and short:
                steps[v] = further_step(long, short, CHAIN_EXTRA)
        if steps:
            row = "  {:<38}" + " {:>15}" * len(steps)
            lines.append(f"each further TASK step = (chain10 - task-task) / {CHAIN_EXTRA}")
            lines.append(row.format("", *(VARIANTS[v] for v in steps)))
            lines.append(
                row.format(
                    "row writes (ins+upd)",
                    *(f"{s.writes:.1f} ({s.inserts:.1f}+{s.updates:.1f})" for s in steps.values()),
                )
            )
            lines.append(row.format("transactions", *(f"{s.xacts:.1f}" for s in steps.values())))
            cpu = [
                further_cpu(results["chain10"][v].cpu_ms, results["task-task"][v].cpu_ms, CHAIN_EXTRA)
                for v in steps
            ]
            lines.append(row.format("CPU ms: PG+engine+client", *cpu))
            lines.append("")
    # Ledgerflow per table
    lf = {name: r["ledgerflow"].per_workflow() for name, r in results.items() if "ledgerflow" in r}
    lf = {k: v for k, v in lf.items() if v is not None}
    if lf:
        cols: dict[str, PerWorkflow] = dict(lf)
        if "task-task" in lf and "chain10" in lf:
            cols["each further step"] = further_step(lf["chain10"], lf["task-task"], CHAIN_EXTRA)
        lines.append(
            "Ledgerflow row writes per workflow by table (inserts + updates [- deletes]), default settings"
        )
        lines += counts_table(cols)
        lines.append("")
    # where Ledgerflow's bytes go
    sized = {
        name: r["ledgerflow"]
        for name, r in results.items()
        if r.get("ledgerflow") and r["ledgerflow"].bytes_by_table
    }
    if sized:
        lines += bytes_table(sized)
        lines.append("")
    # the peers' bytes by part
    for name, by_variant in results.items():
        for v, r in by_variant.items():
            if not v.startswith("ledgerflow") and r.bytes_by_part:
                lines += parts_table(f"{VARIANTS[v]} {name}", r)
                lines.append("")
    # the idle probe
    probes = [
        (name, r["ledgerflow"])
        for name, r in results.items()
        if "ledgerflow" in r and r["ledgerflow"].probe_n
    ]
    if probes:
        lines.append(
            "Ledgerflow idle probe (workflows one at a time, task workers waiting in long polls), p50 / p99 ms:"
        )
        for name, r in probes:
            parts = [f"latency {_lat(r.probe_latency_ms)}"]
            if r.probe_hop_ms:
                parts.append(f"step hop {_lat(r.probe_hop_ms)} ({len(r.probe_hop_ms)} hops)")
            if SHAPES[name].timer:
                parts.append(
                    f"timer lateness {_lat(r.probe_timer_late_ms)} ({len(r.probe_timer_late_ms)} timers)"
                )
            lines.append(f"  {name} ({r.probe_n} workflows): " + "; ".join(parts))
        lines.append(
            "  (step hop: task k's completed_at, now() of its completing transaction, to the task function of "
            "step k+1 being entered in the TaskWorker; timer lateness: the delay_wake job's attempt start - due time)"
        )
        lines.append("")
    for name, by_variant in results.items():
        for v, r in by_variant.items():
            lines.extend(f"note ({VARIANTS.get(v, v)}, {name}): {n}" for n in r.notes)
    return "\n".join(lines).rstrip()


def bytes_table(by_shape: dict[str, RunResult], top: int = 12) -> list[str]:
    """Ledgerflow's bytes on disk per workflow by table (heap, TOAST and indexes), largest first."""
    names = sorted(
        {t for r in by_shape.values() for t in r.bytes_by_table},
        key=lambda t: -max(r.bytes_by_table.get(t, 0.0) for r in by_shape.values()),
    )[:top]
    row = "  {:<38}" + " {:>21}" * len(by_shape)
    lines = [
        "Ledgerflow bytes per workflow by table (heap + TOAST + indexes; the largest): "
        "on disk / in use after VACUUM"
    ]
    lines.append(row.format("", *by_shape))
    for t in names:
        lines.append(
            row.format(
                t.removeprefix("public."),
                *(
                    f"{r.bytes_by_table.get(t, 0.0):,.0f} / {r.used_by_table.get(t, 0.0):,.0f}"
                    for r in by_shape.values()
                ),
            )
        )
    lines.append(
        row.format(
            "all tables",
            *(
                f"{r.bytes_per_workflow or 0:,.0f} / {r.used_per_workflow or 0:,.0f}"
                for r in by_shape.values()
            ),
        )
    )
    for name, r in by_shape.items():
        if r.bytes_by_part:
            lines += parts_table(name, r)
    return lines


def parts_table(shape: str, r: RunResult, min_bytes: float = 1.0) -> list[str]:
    """Where each byte of a table went (heap, TOAST, each index, per workflow) and how often the run
    used each index (``pg_stat_user_indexes.idx_scan`` in the run's window); then ``pgstattuple`` of
    the largest tables after the run (live and dead tuple bytes, free space), when the server has it."""
    tables = sorted(
        {k.split(":")[0].removesuffix(" (toast)") for k in r.bytes_by_part},
        key=lambda t: -r.bytes_by_table.get(t if "." in t else f"public.{t}", 0.0),
    )
    lines = [f"  {shape}: bytes per workflow by part (index scans in the run)"]
    for t in tables:
        if r.bytes_by_table.get(t if "." in t else f"public.{t}", 0.0) < min_bytes:
            continue
        heap, toast = r.bytes_by_part.get(t, 0.0), r.bytes_by_part.get(f"{t} (toast)", 0.0)
        lines.append(f"    {t:<44} heap {heap:>7,.0f}   toast {toast:>7,.0f}")
        for k in sorted(
            (k for k in r.index_scans if k.split(":")[0] == t), key=lambda k: -r.bytes_by_part.get(k, 0)
        ):
            lines.append(
                f"      {k.split(':', 1)[1]:<42} {r.bytes_by_part.get(k, 0.0):>7,.0f}   scans {r.index_scans[k]:>9,}"
            )
    if r.tuples:
        lines.append(
            f"  {shape}: pgstattuple after the run (bytes per live tuple, dead tuple bytes, free space)"
        )
        for t, v in r.tuples.items():
            per = v["live_bytes"] / v["live"] if v["live"] else 0.0
            lines.append(
                f"    {t.removeprefix('public.'):<44} {v['live']:>7,} live x {per:>5,.0f} B   "
                f"dead {v['dead_bytes']:>9,} B   free {v['free_bytes']:>9,} B of {v['bytes']:>10,}"
            )
    return lines


def counts_report(results: dict[str, RunResult], n: int) -> str:
    cols: dict[str, PerWorkflow] = {k: pw for k, r in results.items() if (pw := r.per_workflow()) is not None}
    if "task-task" in cols and "chain10" in cols:
        cols["each further step"] = further_step(cols["chain10"], cols["task-task"], CHAIN_EXTRA)
    lines = [
        f"Ledgerflow database work per workflow (N = {n} per shape; inserts + updates [- deletes] per table)"
    ]
    lines += counts_table(cols)
    sized = {name: r for name, r in results.items() if r.bytes_by_table}
    if sized:
        lines.append("")
        lines += bytes_table(sized)
    for name, r in results.items():
        lines.extend(f"note ({name}): {n}" for n in r.notes)
        if r.failed:
            lines.append(f"note: {r.failed} {name} workflows did not succeed")
        if r.wall:
            lines.append(f"  ({name}: {r.rate:.1f} workflows/s in this run; not a benchmark at this N)")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.workflows",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--shape",
        "--shapes",
        dest="shape",
        default="all",
        help=f"all, or comma-separated: {', '.join(SHAPES)}",
    )
    ap.add_argument(
        "--n",
        type=int,
        default=None,
        help="workflows per shape and engine (default 300; 20 with --counts-only)",
    )
    ap.add_argument(
        "--engines",
        default="ledgerflow,dbos,absurd",
        help=f"comma-separated, from {', '.join(VARIANTS)}; or all",
    )
    ap.add_argument(
        "--no-rate-limit",
        action="store_true",
        help="add the Ledgerflow column with LEDGERFLOW_RATE_LIMIT=off",
    )
    ap.add_argument(
        "--dbos-client", action="store_true", help="add the DBOSClient.enqueue + worker process column"
    )
    ap.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="workflows run before the measured ones (default 100; 2 with --counts-only)",
    )
    ap.add_argument(
        "--probe",
        type=int,
        default=10,
        help="Ledgerflow workflows run one at a time for the step hop and timer lateness (0: none)",
    )
    ap.add_argument(
        "--counts-only",
        action="store_true",
        help="Ledgerflow only: row writes per table and transactions per workflow",
    )
    ap.add_argument(
        "--baseline",
        action="store_true",
        help="with --counts-only: also run an empty window (no workflow, as long as the run) and subtract it",
    )
    ap.add_argument(
        "--rate",
        type=float,
        default=None,
        help="workflows offered per second from the 4 client threads together (default: as fast as they go)",
    )
    ap.add_argument(
        "--payload-bytes",
        type=int,
        default=0,
        help="each workflow's input and each task's output carry this many random characters (default 0; "
        "not with the fanout and mapping shapes)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every shape this many times, the engines alternated (default 1; the table shows each "
        "engine's median round and lists every round)",
    )
    ap.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        a.shapes = parse_shapes(a.shape)
    except ValueError as exc:
        ap.error(str(exc))
    if not 1 <= a.rounds <= MAX_ROUNDS:
        ap.error(f"--rounds must be from 1 to {MAX_ROUNDS}")
    if a.rounds > 1 and a.counts_only:
        ap.error("--rounds does not apply to --counts-only (its counts do not drift)")
    if a.rate is not None and not a.rate > 0:
        ap.error("--rate must be a positive number of workflows per second")
    if not 0 <= a.payload_bytes <= wf_common.MAX_PAYLOAD_BYTES:
        ap.error(f"--payload-bytes must be from 0 to {wf_common.MAX_PAYLOAD_BYTES:,}")
    if a.payload_bytes and (odd := [s.name for s in a.shapes if s.fanout or s.mapping]):
        ap.error(f"--payload-bytes applies to the shapes of plain TASK and TIMER steps, not {', '.join(odd)}")
    a.n = a.n or (20 if a.counts_only else 300)
    a.warmup = a.warmup if a.warmup is not None else (2 if a.counts_only else 100)
    engines = (
        list(VARIANTS)
        if a.engines.strip() == "all"
        else [e.strip() for e in a.engines.split(",") if e.strip()]
    )
    if unknown := [e for e in engines if e not in VARIANTS]:
        ap.error(f"unknown engine(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    if a.no_rate_limit and "ledgerflow-nolimit" not in engines:
        engines.append("ledgerflow-nolimit")
    if a.dbos_client and "dbos-client" not in engines:
        engines.append("dbos-client")
    a.variants = [v for v in VARIANTS if v in engines]
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    if not os.environ.get("DATABASE_URL"):
        sys.exit("DATABASE_URL is not set: run `make bench` (it starts embedded services) or export it")
    wf_common.OFFERED_RATE = a.rate
    wf_common.PAYLOAD_BYTES = a.payload_bytes
    if a.child:
        res = run_variant(a.child, a.shapes[0], a.n, a.warmup, a.probe)
        Path(a.result).write_text(json.dumps(res.to_json()))
        return
    t0 = time.monotonic()
    if a.counts_only:
        from bench.wf_ledgerflow import run_ledgerflow

        counted: dict[str, RunResult] = {}
        for s in a.shapes:
            r = run_ledgerflow(
                s,
                shape_n(s, a.n),
                warmup=shape_warmup(s, a.warmup),
                probe=0,
                rate_limit=True,
                counts_only=True,
            )
            if a.baseline and r.counts is not None:
                log(f"ledgerflow {s.name}: the empty window, {r.active_s:.1f} s without a workflow")
                empty = run_ledgerflow(
                    s,
                    0,
                    warmup=shape_warmup(s, a.warmup),
                    probe=0,
                    rate_limit=True,
                    counts_only=True,
                    idle=r.active_s,
                )
                if empty.counts is not None:
                    r.notes.append(
                        f"less an empty window of {r.active_s:.1f} s + the stop: {empty.counts.writes} row writes "
                        f"({', '.join(f'{t} {v[0]}+{v[1]}' for t, v in sorted(empty.counts.tables.items()))}), "
                        f"{empty.counts.xacts} transactions"
                    )
                    r.counts = r.counts.minus(empty.counts)
            counted[s.name] = r
        print(counts_report(counted, a.n))
        print(f"(total {time.monotonic() - t0:.0f} s)")
        return
    rounds: dict[str, dict[str, list[RunResult]]] = {}
    with tempfile.TemporaryDirectory(prefix="lf-bench-wf-") as tmp:
        for shape in a.shapes:
            for i in range(a.rounds):
                for v in round_order(a.variants, i):
                    if v == "dbos-nolimit" and not shape.fanout:
                        continue  # the same run as dbos: only the fan-out's element queue differs
                    of = f", round {i + 1} of {a.rounds}" if a.rounds > 1 else ""
                    log(f"workflows: {v} on {shape.name}, N = {shape_n(shape, a.n)}{of}")
                    rounds.setdefault(shape.name, {}).setdefault(v, []).append(
                        run_child(v, shape, a, Path(tmp))
                    )
    results = {s: {v: median_round(runs) for v, runs in by.items()} for s, by in rounds.items()}
    table = report(results, a, rounds if a.rounds > 1 else None)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"workflows-{time.strftime('%Y%m%d-%H%M%S')}.json"
    raw = {s: {v: r.to_json() for v, r in by.items()} for s, by in results.items()}
    every = {s: {v: [r.to_json() for r in runs] for v, runs in by.items()} for s, by in rounds.items()}
    path.write_text(
        json.dumps(
            {"argv": sys.argv[1:], "load_end": loadavg(), "results": raw, "rounds": every, "table": table},
            indent=1,
        )
    )
    print(table)
    print(
        f"(total {time.monotonic() - t0:.0f} s; raw numbers in {path.relative_to(ROOT)}; load at end {loadavg()})"
    )


if __name__ == "__main__":
    main()
