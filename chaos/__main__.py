"""``python -m chaos`` (``make chaos``): run the fault scenarios against fresh databases on the
configured PostgreSQL server and print one table (faults injected, jobs, workflows, invariants
checked, violations, recovery time). ``--quick`` is the short version ``make test`` also runs."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from chaos import failover, pgbouncer
from chaos.scenarios import FULL, OPT_IN, QUICK, SCENARIOS, Result, run


def table(results: list[Result]) -> str:
    head = ("scenario", "faults", "jobs", "workflows", "invariants", "violations", "recovery s")
    rows = [
        (
            r.scenario,
            str(r.faults),
            str(r.jobs),
            str(r.workflows),
            str(len(r.invariants)),
            str(r.violations),
            "-" if r.recovery_seconds is None else f"{r.recovery_seconds:.1f}",
        )
        for r in results
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]
    for r in results:
        for n in r.notes:
            out.append(f"- {r.scenario}: {n}")
        for name, v in r.invariants.items():
            if v:
                out.append(f"- {r.scenario}: VIOLATED {name} ({v})")
        if r.error:
            out.append(f"- {r.scenario}: ERROR {r.error}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="a few faults of each kind (about a minute each)"
    )
    parser.add_argument(
        "--only",
        help="comma-separated scenario names: "
        + ", ".join([*SCENARIOS, failover.NAME])
        + "; opt-in (restarts the PostgreSQL server): "
        + ", ".join(OPT_IN),
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the database of a scenario that failed")
    parser.add_argument(
        "--pgbouncer",
        action="store_true",
        help="the processes reach PostgreSQL through a private PgBouncer in transaction mode",
    )
    args = parser.parse_args(argv)
    server = os.environ.get("DATABASE_URL")
    if not server:
        print("error: DATABASE_URL is not set (run through `make chaos`)", file=sys.stderr)
        return 2
    names = args.only.split(",") if args.only else [*SCENARIOS, failover.NAME]
    unknown = [n for n in names if n not in SCENARIOS and n not in OPT_IN and n != failover.NAME]
    if unknown:
        print(
            f"error: unknown scenario(s) {', '.join(unknown)}; "
            f"choose from {', '.join([*SCENARIOS, failover.NAME])}",
            file=sys.stderr,
        )
        return 2
    results = []
    with contextlib.ExitStack() as stack:
        through = stack.enter_context(pgbouncer.running(server)) if args.pgbouncer else None
        pooling = {"LEDGERFLOW_DB_TRANSACTION_POOLING": "on"} if through else None
        for name in names:
            started = time.monotonic()
            print(f"running {name} ...", flush=True)
            if name == failover.NAME:  # its own PostgreSQL pair (pg_auto_failover), never through PgBouncer
                size = failover.QUICK if args.quick else failover.FULL
                results.append(failover.run_failover(size, keep_failed=args.keep))
                print(f"  done in {time.monotonic() - started:.0f} s", flush=True)
                continue
            results.append(
                run(
                    name,
                    QUICK if args.quick else FULL,
                    server,
                    keep_failed=args.keep,
                    process_server_url=through,
                    settings=pooling,
                )
            )
            print(f"  done in {time.monotonic() - started:.0f} s", flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 1 if any(r.violations for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
