"""A live server started exactly the way `make run` starts it (the `make run` target itself, with
the test session's DATABASE_URL / REDIS_URL and a PORT in this suite's range), and the helpers the
documentation tests use to run documented commands against it."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
PORTS = range(5300, 5400)


def need_venv() -> None:
    if not (VENV_BIN / "ledgerflow").exists():
        pytest.skip("the documented commands use .venv/bin (created by `make run` / `make test`)")


def free_port() -> int:
    ports = list(PORTS)
    random.shuffle(ports)
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 5300-5399")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class MakeRun:
    proc: subprocess.Popen
    port: int
    log_path: Path
    # what a shell next to it needs to find the same services (the embedded ones: their data folder)
    shell_env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a shell beside this `make run` (a newcomer's second terminal)."""
        env = {**os.environ, **self.shell_env, **extra}
        for k in self.unset:
            env.pop(k, None)
        return env

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def processes(self) -> list[psutil.Process]:
        """`make` and everything it started (honcho, gunicorn and its workers, the ledger processes)."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self, sig: int = signal.SIGTERM, *, group: bool = False, timeout: float = 30) -> list[str]:
        """Send ``sig`` to make (or its whole process group, like Ctrl-C in a terminal); returns the
        command lines of processes still alive after ``timeout`` (killed afterwards)."""
        procs = self.processes()
        if self.proc.poll() is None:
            if group:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        _, alive = psutil.wait_procs(procs, timeout=timeout)
        left = []
        for p in alive:
            try:
                left.append(" ".join(p.cmdline()))
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait(10)
        return left


def embedded(tmp_dir: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """(environment, names to unset) of a newcomer's machine: no DATABASE_URL / REDIS_URL, so `make run`
    and every command use the embedded PostgreSQL and Redis (here under a data folder of their own)."""
    return {"LEDGERFLOW_DATA_DIR": str(tmp_dir / "data")}, ("DATABASE_URL", "REDIS_URL")


def stop_embedded(run: MakeRun) -> None:
    if run.unset:
        subprocess.run(
            [str(VENV_BIN / "ledgerflow"), "services-stop"],
            env=run.env(),
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )


def start_make_run(
    tmp_dir: Path,
    extra_env: dict[str, str] | None = None,
    *,
    shell_env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
) -> MakeRun:
    """`make run` itself, on a free port; ``shell_env`` / ``unset`` apply to it and to the shells
    beside it (``MakeRun.env``)."""
    need_venv()
    port = free_port()
    env = {**os.environ, "PORT": str(port), **(extra_env or {}), **(shell_env or {})}
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "LEDGERFLOW_URL", "LEDGERFLOW_TOKEN", *unset):
        env.pop(k, None)
    log_path = tmp_dir / f"make-run-{port}.log"
    out = open(log_path, "w")
    proc = subprocess.Popen(
        ["make", "-s", "run"],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a terminal gives it
    )
    run = MakeRun(proc, port, log_path, dict(shell_env or {}), unset)
    deadline = time.monotonic() + 180  # the embedded PostgreSQL's first start initializes its data
    while True:
        log = run.log()
        if proc.poll() is not None or time.monotonic() > deadline:
            run.stop(signal.SIGKILL, group=True, timeout=5)
            stop_embedded(run)
            raise RuntimeError(f"`make run` did not come up:\n{log}")
        if len(re.findall(r"ledgerflow worker \w+ ready", log)) == 2 and "scheduler ready" in log:
            try:
                with urllib.request.urlopen(run.url + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        return run
            except OSError:
                pass
        time.sleep(0.2)
