"""How long a worker process takes to be ready to claim, in CPU seconds.

    PYTHONPATH=. .venv/bin/ledgerflow env -- .venv/bin/python -m bench.startup [--runs 5] [--pool advance]

Starts ``ledgerflow worker --pool POOL`` on its own database ``--runs`` times and reads, when the
process prints its ``ready`` line (after it registered its node and started its pool and its hint
consumer), the CPU time it has used (user + system, ``/proc/<pid>/stat``) and the wall time since
the spawn. Each configuration runs in turn:

- *bytecode cached*: the project's modules compiled beforehand (``make install`` runs
  ``compileall``, as a deployment's build step does);
- *no bytecode*: ``PYTHONDONTWRITEBYTECODE=1`` and the project's ``__pycache__`` folders moved aside,
  so every module of the project is compiled from source at each start (what a checkout that never
  wrote bytecode pays).

Prints median and max per configuration. Numbers only, never assertions.
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.run import ROOT, base_env, cpu_seconds, libpq, loadavg, scratch_database

PROJECT_PACKAGES = ("app", "actors", "ledgerflow", "schemas", "web")


def start_once(env: dict[str, str], pool: str, timeout: float = 60.0) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one worker process until it printed ``ready``."""
    began = time.monotonic()
    proc = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "ledgerflow"), "worker", "--pool", pool],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if " ready: " in line:
                return cpu_seconds(proc.pid), time.monotonic() - began
            if time.monotonic() - began > timeout:
                break
        raise RuntimeError(f"the worker did not print its ready line (exit code {proc.poll()})")
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def without_bytecode() -> Iterator[None]:
    """The project's ``__pycache__`` folders moved aside for the duration, then put back."""
    aside = Path(tempfile.mkdtemp(prefix="lf-pycache-"))
    moved: list[tuple[Path, Path]] = []
    try:
        for pkg in PROJECT_PACKAGES:
            for cache in sorted((ROOT / pkg).rglob("__pycache__")):
                target = aside / str(len(moved))
                shutil.move(str(cache), target)
                moved.append((cache, target))
        yield
    finally:
        for cache, target in moved:
            if cache.exists():
                shutil.rmtree(cache)
            shutil.move(str(target), cache)
        shutil.rmtree(aside, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.startup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--pool", choices=("advance", "outbound"), default="advance")
    a = p.parse_args()
    with scratch_database("lf_bench_startup") as url:
        env = base_env()
        env["DATABASE_URL"] = libpq(url)
        results: dict[str, list[tuple[float, float]]] = {}
        for pkg in PROJECT_PACKAGES:
            compileall.compile_dir(str(ROOT / pkg), quiet=1)
        cached_env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        start_once(cached_env, a.pool)  # warm the page cache
        results["bytecode cached"] = [start_once(cached_env, a.pool) for _ in range(a.runs)]
        with without_bytecode():
            results["no bytecode (compiled at each start)"] = [
                start_once({**env, "PYTHONDONTWRITEBYTECODE": "1"}, a.pool) for _ in range(a.runs)
            ]
    print(f"worker --pool {a.pool} until ready ({a.runs} runs each, load {loadavg()})")
    print(f"{'configuration':<40} {'CPU s median':>12} {'CPU s max':>10} {'wall s median':>14}")
    for name, runs in results.items():
        cpu = [c for c, _ in runs]
        wall = [w for _, w in runs]
        print(
            f"{name:<40} {statistics.median(cpu):>12.2f} {max(cpu):>10.2f} {statistics.median(wall):>14.2f}"
        )


if __name__ == "__main__":
    main()
