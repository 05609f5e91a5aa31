"""A highly available PostgreSQL for the fault suite: Debian's pg_auto_failover
(``postgresql-15-auto-failover``) with a monitor and two nodes (a primary and a synchronous standby) on
free local ports, data under a temporary directory, run as the ``postgres`` user when we are root.

``Formation.url(db)`` is the libpq multi-host URL the Procfile processes get
(``postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/db?target_session_attrs=read-write``); the suite's
own checks use the same hosts. The faults: ``switchover()`` (the manager's own ``pg_autoctl perform
switchover``) and ``kill_node()`` (SIGKILL of the primary's postmaster together with its pg_autoctl
keeper, as when the machine is lost: a postmaster killed alone is restarted in place by its keeper
within a second and nothing fails over), then ``restart_node()`` brings the lost node back as the new
standby (pg_autoctl rewinds it)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from chaos.harness import free_port, wait_until

PG_BIN = Path("/usr/lib/postgresql/15/bin")
# The monitor decides fast enough for a test run (the defaults: a check every 5 s, a node unhealthy
# after 20 s, 30 s for a lost primary to demote itself before the standby is promoted; production keeps
# them, docs/operations.md "High availability").
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.node_considered_unhealthy_timeout": "4000",
    "pgautofailover.primary_demote_timeout": "3000",
}
WRITABLE = ("primary", "wait_primary", "single")
MISSING = (
    "pg_auto_failover is not installed: apt-get install -y postgresql-15-auto-failover "
    "(the failover scenario needs pg_autoctl and the pgautofailover extension of PostgreSQL 15)"
)


def pg_autoctl() -> str | None:
    """The pg_autoctl executable when pg_auto_failover and its PostgreSQL 15 extension are installed."""
    found = shutil.which("pg_autoctl") or str(PG_BIN / "pg_autoctl")
    extension = Path("/usr/share/postgresql/15/extension/pgautofailover.control")
    if os.access(found, os.X_OK) and extension.exists() and (PG_BIN / "pg_ctl").exists():
        return found
    return None


@dataclass
class Node:
    name: str
    port: int
    pgdata: Path
    proc: subprocess.Popen | None = None


@dataclass
class Formation:
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lf-pgaf-")))
    monitor_port: int = field(default_factory=free_port)
    nodes: dict[str, Node] = field(default_factory=dict)
    monitor: subprocess.Popen | None = None
    exe: str = ""

    # ------------------------------------------------------------------ commands
    def _user(self) -> str | None:
        return "postgres" if os.geteuid() == 0 else None  # pg_autoctl refuses to run as root

    def _argv(self, *args: str) -> list[str]:
        env = [
            f"PATH={PG_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            f"XDG_CONFIG_HOME={self.workdir / 'config'}",
            f"XDG_DATA_HOME={self.workdir / 'share'}",
            f"XDG_RUNTIME_DIR={self.workdir / 'run'}",  # pid files (else under /tmp/pg_autoctl)
            f"HOME={self.workdir}",
        ]
        user = self._user()
        prefix = ["runuser", "-u", user, "--"] if user else []
        return [*prefix, "env", *env, self.exe, *args]

    def _run(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            self._argv(*args), capture_output=True, text=True, timeout=timeout, cwd=self.workdir, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
        return done.stdout

    def _spawn(self, log: str, *args: str) -> subprocess.Popen:
        out = open(self.workdir / log, "a")  # the process owns it
        return subprocess.Popen(
            self._argv(*args), stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir, start_new_session=True
        )

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        exe = pg_autoctl()
        if exe is None:
            raise FileNotFoundError(MISSING)
        self.exe = exe
        user = self._user()
        (self.workdir / "run").mkdir(mode=0o700)
        if user:
            uid = pwd.getpwnam(user).pw_uid
            os.chown(self.workdir, uid, -1)
            os.chown(self.workdir / "run", uid, -1)
        mon = self.workdir / "monitor"
        common = ["--pgctl", str(PG_BIN / "pg_ctl"), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"]
        port = str(self.monitor_port)
        self._run(
            "create", "monitor", "--pgdata", str(mon), "--pgport", port, "--listen", "127.0.0.1", *common
        )
        for name, value in MONITOR_SETTINGS.items():  # read at the monitor's start
            with open(mon / "postgresql.auto.conf", "a") as f:
                f.write(f"{name} = '{value}'\n")
        self.monitor = self._spawn("monitor.log", "run", "--pgdata", str(mon))
        wait_until(lambda: self._monitor_up(), 60, interval=0.3)
        for name in ("a", "b"):
            node = Node(name, free_port(), self.workdir / name)
            self.nodes[name] = node
            node.proc = self._spawn(
                f"node-{name}.log",
                "create",
                "postgres",
                "--pgdata",
                str(node.pgdata),
                "--pgport",
                str(node.port),
                "--listen",
                "127.0.0.1",
                "--name",
                name,
                "--monitor",
                self.monitor_uri,
                "--run",
                *common,
            )
            want = {"a": "single"} if name == "a" else {"a": "primary", "b": "secondary"}
            wait_until(lambda want=want: self._states_are(want), 120, interval=0.5)

    def stop(self) -> None:
        for node in self.nodes.values():
            self._stop(node.proc, node.pgdata)
        self._stop(self.monitor, self.workdir / "monitor")
        for path in self.workdir.iterdir():  # the data goes, the logs stay (a few kB)
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)

    def _stop(self, proc: subprocess.Popen | None, pgdata: Path) -> None:
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # pg_autoctl stops its Postgres (fast mode)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        pid = _postmaster_pid(pgdata)  # left behind by a keeper killed before it
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    # ------------------------------------------------------------------ state
    @property
    def monitor_uri(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor_port}/pg_auto_failover?sslmode=disable"

    def url(self, dbname: str) -> str:
        """The libpq multi-host URL of both nodes: a session goes to whichever accepts writes."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values())
        return f"postgresql://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    def _monitor_up(self) -> bool:
        try:
            self.states()
        except psycopg.Error:
            return False
        return True

    def states(self) -> dict[str, tuple[str, str]]:
        """Each node's (reported state, goal state) as the monitor sees them."""
        conninfo = (
            f"host=127.0.0.1 port={self.monitor_port} dbname=pg_auto_failover user=postgres connect_timeout=3"
        )
        with psycopg.connect(conninfo, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT nodename, reportedstate, goalstate FROM pgautofailover.node"
            ).fetchall()
        return {str(r[0]): (str(r[1]), str(r[2])) for r in rows}

    def _states_are(self, want: dict[str, str]) -> bool:
        try:
            states = self.states()
        except psycopg.Error:
            return False
        return all(states.get(n) == (s, s) for n, s in want.items())

    def primary(self) -> str | None:
        """The node the monitor has made the writable one (reported and goal state agree)."""
        try:
            return primary_of(self.states())
        except psycopg.Error:
            return None

    def wait_promoted(self, other_than: str, timeout: float = 90) -> str:
        """Wait until a node other than ``other_than`` is the writable one; its name."""
        return wait_until(lambda: (p := self.primary()) != other_than and p, timeout, interval=0.1)

    def wait_healthy(self, timeout: float = 120) -> None:
        """A primary and a secondary again (the lost node rejoined as the standby)."""

        def healthy() -> bool:
            try:
                states = self.states()
            except psycopg.Error:
                return False
            settled = sorted(rep for rep, goal in states.values() if rep == goal)
            return settled == ["primary", "secondary"]

        wait_until(healthy, timeout, interval=0.5)

    # ------------------------------------------------------------------ faults
    def switchover(self) -> None:
        """``pg_autoctl perform switchover``: the primary drains and demotes, the standby is promoted."""
        self._run("perform", "switchover", "--pgdata", str(self.workdir / "monitor"), timeout=120)

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's pg_autoctl keeper and its postmaster (the machine is lost)."""
        node = self.nodes[name]
        pid = _postmaster_pid(node.pgdata)
        if node.proc is not None and node.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.proc.pid, signal.SIGKILL)
            node.proc.wait()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def restart_node(self, name: str) -> None:
        """``pg_autoctl run`` on a lost node: it rejoins as the standby of the new primary."""
        node = self.nodes[name]
        node.proc = self._spawn(f"node-{name}.log", "run", "--pgdata", str(node.pgdata))


def primary_of(states: dict[str, tuple[str, str]]) -> str | None:
    """The writable node of ``Formation.states()`` (its reported and goal state agree), or None."""
    return next((n for n, (rep, goal) in states.items() if rep == goal and rep in WRITABLE), None)


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
