"""``python -m bench.pg_cpu``: where the database server's CPU goes, by process, and what a round trip
and a transaction cost it.

    python -m bench.pg_cpu -- python -m bench.workflows --shape task-task --n 1000 --probe 0 --engines ledgerflow
    python -m bench.pg_cpu --probe

With a command: runs it, and meanwhile samples every server process's CPU (user + system, from ``/proc``:
the server must run on this machine) and names each by ``pg_stat_activity`` (backend type, and a client
backend's ``application_name``); prints the CPU each group used while the command ran. ``--probe``: the
backend CPU of a round trip (a prepared ``SELECT 1``, an empty query), of a read transaction and of a
one-row write transaction (``synchronous_commit`` on and off), on one connection. Numbers only (bench/README,
"Where PostgreSQL's CPU per workflow goes"). The server is DATABASE_URL's (default: the machine's).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections import Counter

import psycopg

from bench.run import cpu_seconds, libpq

SAMPLE_SECONDS = 0.5


def _dsn() -> str:
    return libpq(os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))


def _server_pids(conn: psycopg.Connection) -> dict[int, str]:
    """Every server process the statistics name, with its group's label."""
    rows = conn.execute(
        "SELECT pid, backend_type, COALESCE(NULLIF(application_name, ''), '(no name)') FROM pg_stat_activity"
    ).fetchall()
    return {pid: (f"client backend: {app}" if kind == "client backend" else kind) for pid, kind, app in rows}


def by_process(command: list[str]) -> int:
    """Runs ``command``, sampling the server's processes meanwhile; prints CPU seconds by group."""
    conn = psycopg.connect(_dsn(), autocommit=True, application_name="bench-pg-cpu")
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    label: dict[int, str] = {}
    done = threading.Event()

    def sample() -> None:
        while True:
            label.update(_server_pids(conn))
            for pid in label:
                value = cpu_seconds(pid)
                if value:  # 0.0: gone (its last reading stands), or nothing used yet
                    first.setdefault(pid, value)
                    last[pid] = value
            if done.wait(SAMPLE_SECONDS):
                return

    sampler = threading.Thread(target=sample, name="bench-pg-cpu")
    sampler.start()
    t0 = time.monotonic()
    try:
        rc = subprocess.call(command)
    finally:
        done.set()
        sampler.join()
        conn.close()
    groups: Counter[str] = Counter()
    for pid, value in last.items():
        groups[label.get(pid, "(unnamed)")] += value - first[pid]
    total = sum(groups.values()) or 1.0
    print(
        f"server CPU by process while the command ran ({time.monotonic() - t0:.0f} s; sampled every "
        f"{SAMPLE_SECONDS:g} s: a process that lived less than that is missed)"
    )
    for name, seconds in groups.most_common():
        print(f"  {seconds:8.2f} s  {seconds / total * 100:5.1f} %  {name}")
    print(f"  {sum(groups.values()):8.2f} s  total")
    return rc


def probe(n: int) -> None:
    """The backend CPU of a round trip and of a transaction, on one connection."""
    with psycopg.connect(_dsn(), autocommit=True, application_name="bench-pg-cpu") as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]

        def per(run, count: int) -> float:
            c0 = cpu_seconds(pid)
            for _ in range(count):
                run()
            return (cpu_seconds(pid) - c0) / count * 1e6

        print(f"backend CPU per operation (us; {n} round trips, {n // 4} transactions each)")
        print(
            f"  prepared SELECT 1:                  {per(lambda: conn.execute('SELECT 1', prepare=True), n):6.1f}"
        )
        print(
            f"  empty query:                        {per(lambda: conn.execute(';', prepare=False), n):6.1f}"
        )
        conn.execute("CREATE TABLE IF NOT EXISTS bench_pg_cpu_probe (id bigserial PRIMARY KEY, v text)")
        try:

            def read_tx() -> None:
                with conn.transaction():
                    conn.execute("SELECT 1", prepare=True)

            def write_tx() -> None:
                with conn.transaction():
                    conn.execute("INSERT INTO bench_pg_cpu_probe (v) VALUES (%s)", ("x" * 40,), prepare=True)

            print(f"  BEGIN; SELECT 1; COMMIT:            {per(read_tx, n // 4):6.1f}")
            for sync in ("on", "off"):
                conn.execute(f"SET synchronous_commit = {sync}")
                print(f"  BEGIN; INSERT 1 row; COMMIT ({sync:>3}):  {per(write_tx, n // 4):6.1f}")
        finally:
            conn.execute("DROP TABLE IF EXISTS bench_pg_cpu_probe")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.pg_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--probe", action="store_true", help="the cost of a round trip and of a transaction")
    ap.add_argument("--n", type=int, default=20000, help="round trips per probe (default 20000)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run while sampling")
    a = ap.parse_args(argv)
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if a.probe:
        if a.n < 4:
            ap.error("--n must be at least 4")
        probe(a.n)
    if command:
        sys.exit(by_process(command))
    if not a.probe:
        ap.error("give --probe, or -- and a command to run while sampling")


if __name__ == "__main__":
    main()
