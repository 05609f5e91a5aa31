"""The test kit: a pytest plugin (registered by the server distribution's ``pytest11`` entry point, so
installing ``ledgerflow`` is enough) whose fixtures give a test a running Ledgerflow, a client, a task
worker for the test's functions, a namespace of its own, and time skipping. docs/testing.md shows it.

Fixtures (none does anything unless a test asks for it):

- ``ledgerflow_server`` (session): a Ledgerflow of the test session: its own database on the PostgreSQL
  that DATABASE_URL names (the embedded one of ``make run`` when unset), migrated, and the Redis of
  REDIS_URL (the embedded one when DATABASE_URL is unset too); the web process, both worker pools and
  the scheduler run as child processes, and stop (the database dropped) at the end of the session.
- ``ledgerflow_env`` (each test): a fresh namespace and a credential for it, a ``Client``, a
  ``TaskWorker`` (``env.task("queue")`` registers a function; the worker runs in a thread from the first
  start on) and ``env.skip_time(hours=1)``.
- ``ledgerflow_client`` / ``ledgerflow_worker``: the client and the worker of ``ledgerflow_env``.

Time skipping: ``env.skip_time(...)`` makes every timer, retry backoff, signal timeout, task and
workflow deadline and schedule fire of the test's namespace that would fall due within the span fall due
now (``app.integrations.time_skip``). Only the server the kit started has it: the kit passes its process
id and a random key in LEDGERFLOW_TEST_TIME_SKIPPING, and the server turns it on only when that process is
one of its ancestors (and never with LEDGERFLOW_ENV=production); requests carry the key.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if (
    TYPE_CHECKING
):  # imported where used: loading the plugin costs a pytest session that uses none of it nothing
    from ledgerflow.client import Client, TaskWorker, WorkflowInstance

KEY_HEADER = "X-Ledgerflow-Time-Skipping-Key"  # app.integrations.time_skip.HEADER (the kit imports no web)
SKIP_PATH = "/v1/testing/time-skip"
START_TIMEOUT = 60.0  # seconds the processes may take to start on a busy machine (typically 2-5 s)

# The settings of the kit's processes: short polls (Redis hints wake the pools at once anyway; without
# Redis these bound every wait), no rate limit, warnings only.
PROCESS_SETTINGS = {
    "LEDGERFLOW_POLL_SECONDS": "0.25",
    "LEDGERFLOW_CLAIM_POLL_SECONDS": "0.25",
    "LEDGERFLOW_SCHEDULE_TICK_SECONDS": "0.25",
    "LEDGERFLOW_RECLAIM_SECONDS": "1",
    "LEDGERFLOW_RATE_LIMIT": "off",
    "LEDGERFLOW_SHUTDOWN_GRACE_SECONDS": "1",
    "LEDGERFLOW_METRICS": "off",
    "LOG_LEVEL": "WARNING",
    "LOG_FORMAT": "console",
}


def _die_with_parent() -> Callable[[], object] | None:
    """Linux: a function for ``preexec_fn`` that makes the child get SIGTERM when the test process dies (a
    killed pytest leaves nothing behind); None elsewhere. Looked up here, in the parent: the child runs it
    between fork and exec, where importing a module could wait for a lock another thread held at the fork."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return functools.partial(prctl, 1, 15)  # PR_SET_PDEATHSIG, SIGTERM


@dataclass
class _Process:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Timings:
    """What starting the server cost (seconds), printed at the end of the session."""

    database: float = 0.0  # create + migrate
    processes: float = 0.0  # until every process said it is ready
    total: float = 0.0
    tests: list[float] = field(default_factory=list)  # each ledgerflow_env's set-up + tear-down


class LedgerflowServer:
    """A running Ledgerflow of one test session (``ledgerflow_server``); ``start()`` / ``stop()``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.url = ""
        self.key = secrets.token_urlsafe(32)
        self.database = f"lf_kit_{uuid.uuid4().hex[:12]}"
        self.database_url = ""
        self.redis_url: str | None = None
        self.timings = Timings()
        self._admin_url = ""
        self._created = False
        self._processes: list[_Process] = []
        self._engine: Any = None
        self.winding_down: list[threading.Thread] = []  # the workers of ended tests, ending their last poll
        self.notes: list[str] = []  # lines the tests asked to print at the end of the session (``env.note``)

    # -- start / stop -------------------------------------------------------------------------------
    def start(self) -> LedgerflowServer:
        """Create and migrate the database, start the processes and wait until they are ready (on any
        failure everything started is stopped and the database dropped)."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._create_database()
        self.timings.database = time.monotonic() - began
        began_processes = time.monotonic()
        env = self._process_environment()
        python = [sys.executable, "-m"]
        self._spawn("web", [*python, "web.kit_server"], env)
        self._spawn("worker-advance", [*python, "ledgerflow.cli", "worker", "--pool", "advance"], env)
        self.new_namespace("warm-up")  # meanwhile: the connection pool and the modules the tests' set-up uses
        self._wait_ready()
        # what most tests never need starts once the others run (two processes importing at once, not
        # four), and no test waits for it: the outbound pool (TRIGGER calls, external dispatch, events,
        # webhooks; a job waits in its queue until the pool is up) and the scheduler (schedules' fires in
        # real time, the drain; time skipping hands out schedule fires itself)
        self._spawn("worker-outbound", [*python, "ledgerflow.cli", "worker", "--pool", "outbound"], env)
        self._spawn("scheduler", [*python, "ledgerflow.cli", "scheduler"], env)
        self.timings.processes = time.monotonic() - began_processes
        self.timings.total = time.monotonic() - began

    def pids(self) -> dict[str, int]:
        """The process id of each process of the server by name (``web``, ``worker-advance``, ...)."""
        return {p.name: p.proc.pid for p in self._processes}

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent()
            )
        self._processes.append(_Process(name, proc, log))

    def stop(self) -> None:
        for thread in self.winding_down:
            thread.join(10)
        for p in self._processes:
            if p.proc.poll() is None:
                p.proc.terminate()
        for p in self._processes:
            p.stop()
        self._processes.clear()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        if self._created:
            self._admin(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            self._created = False

    def _services(self) -> tuple[str, str | None]:
        """The PostgreSQL server and Redis to use: the environment's, or the embedded ones of `make run`."""
        from app.settings import DATABASE_URL, REDIS_URL
        from ledgerflow import devenv

        database = DATABASE_URL.get()
        redis_url = REDIS_URL.get()
        if database is None:
            database = devenv.ensure_postgres()
            redis_url = redis_url or devenv.ensure_redis()
        elif redis_url is None:
            redis_url = devenv.running_redis_url()
        return database, redis_url

    def _admin(self, statement: str) -> None:
        from sqlalchemy import create_engine, text

        admin = create_engine(self._admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(statement))
        finally:
            admin.dispose()

    def _create_database(self) -> None:
        from sqlalchemy import make_url

        from app.migrate import upgrade
        from app.settings import normalize_database_url

        server, self.redis_url = self._services()
        url = make_url(normalize_database_url(server))
        self._admin_url = url.set(database="postgres").render_as_string(hide_password=False)
        self._admin(f'CREATE DATABASE "{self.database}"')
        self._created = True
        self.database_url = url.set(database=self.database).render_as_string(hide_password=False)
        upgrade(self.database_url)

    def _process_environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")}
        env.update(PROCESS_SETTINGS)
        env["DATABASE_URL"] = self.database_url
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        env["LEDGERFLOW_REDIS_NAMESPACE"] = self.database.replace("_", "-")
        # the marker of a server the kit started: this process's id (the gate looks for it among the
        # server's ancestors) and the key the kit's requests carry
        env["LEDGERFLOW_TEST_TIME_SKIPPING"] = f"{os.getpid()}:{self.key}"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_root()), env.get("PYTHONPATH", "")]))
        return env

    def _wait_ready(self) -> None:
        """Until every process started so far said it is ready (the web process: its port)."""
        deadline = time.monotonic() + START_TIMEOUT
        waiting = {p.name: p for p in self._processes}
        while waiting:
            for name, p in list(waiting.items()):
                text = p.output()
                if p.proc.poll() is not None:
                    raise RuntimeError(f"the kit's {name} process exited at start:\n{text[-4000:]}")
                if name == "web" and "listening on " in text:
                    port = text.split("listening on ", 1)[1].split()[0]
                    self.url = f"http://127.0.0.1:{port}"
                    del waiting[name]
                elif name != "web" and " ready" in text:
                    del waiting[name]
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the kit's processes did not start in {START_TIMEOUT:g} s: {sorted(waiting)}"
                )
            time.sleep(0.02)

    # -- namespaces -----------------------------------------------------------------------------------
    def engine(self) -> Any:
        """A SQLAlchemy engine on the kit's database (the test process's own DATABASE_URL is not touched)."""
        if self._engine is None:
            from sqlalchemy import create_engine

            from app.db import connect_args

            self._engine = create_engine(self.database_url, connect_args=connect_args(), pool_size=2)
        return self._engine

    def new_namespace(self, label: str = "test") -> tuple[str, str]:
        """A fresh namespace and a token with every namespace permission: (namespace, token)."""
        from app.auth import SWITCHES, create_credential

        namespace = f"kit-{uuid.uuid4().hex[:12]}"
        scopes = sorted({s for granted in SWITCHES.values() for s in granted})
        with self.engine().begin() as conn:
            name = ("kit-" + re.sub(r"[^A-Za-z0-9._-]+", "-", label))[:64]  # e.g. the test's name
            issued = create_credential(conn, namespace=namespace, name=name, scopes=scopes)
        return namespace, issued.token

    def environment(self, label: str = "test") -> LedgerflowEnv:
        namespace, token = self.new_namespace(label)
        return LedgerflowEnv(self, namespace, token)


class TimeSkippingRefused(RuntimeError):
    """The server refused time skipping (not a server the kit started)."""


class LedgerflowEnv:
    """One test's Ledgerflow (``ledgerflow_env``): a namespace of its own, a client, a task worker and
    time skipping."""

    def __init__(self, server: LedgerflowServer, namespace: str, token: str) -> None:
        from ledgerflow.client import Client, TaskWorker

        self.server = server
        self.url = server.url
        self.namespace = namespace
        self.token = token
        self.client = Client(self.url, token)
        self.worker = TaskWorker(self.client, wait_seconds=1, concurrency=4, shutdown_grace_seconds=1)
        self._running: contextlib.ExitStack | None = None
        self._lock = threading.Lock()

    # -- the task worker ------------------------------------------------------------------------------
    def task(self, queue: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: run the function for every task of ``queue`` (the worker starts with the first
        workflow the env starts, or with ``start_worker()``)."""
        return self.worker.task(queue)

    def register(self, functions: dict[str, Callable[..., Any]] | TaskWorker | Any) -> None:
        """Register every function of ``functions`` (queue -> function), of another ``TaskWorker`` (your
        application's worker module), or of a workflow written in Python (``ledgerflow.workflow.Workflow``:
        its steps' functions), on this env's worker."""
        from ledgerflow.client import TaskWorker

        if not isinstance(functions, (dict, TaskWorker)):  # a Workflow: it registers its steps' functions
            register: Callable[[TaskWorker], Any] = functions.register
            register(self.worker)
            return
        found = functions.functions if isinstance(functions, TaskWorker) else functions
        for queue, fn in found.items():
            self.worker.register(queue, fn)

    def start_worker(self) -> None:
        """Run the task worker in a thread until the test ends (no-op without functions, or when running)."""
        with self._lock:
            if self._running is not None or not self.worker.functions:
                return
            stack = contextlib.ExitStack()
            stack.enter_context(self.worker.in_background())
            self._running = stack

    # -- workflows ------------------------------------------------------------------------------------
    def publish(self, name: str, document: dict[str, Any]) -> str:
        """Create the definition ``name`` and publish ``document`` (unless done before); its id."""
        return str(self.client.ensure_definition(name, document)["id"])

    def start(self, definition: str, input: Any = None, *, version: str | None = None) -> str:
        """Start a workflow of ``definition`` (an id or a name) and the worker; the workflow's id."""
        found = None if re.fullmatch(r"[0-9a-f]{32}", definition) else self.client.find_definition(definition)
        def_id = str(found["id"]) if found else definition
        if version is None:  # the newest published version
            version = str(self.client.list_definition_versions(def_id, limit=1).items[0]["version"])
        self.start_worker()
        return self.client.start_workflow(def_id, version, {} if input is None else input).instance.id

    def wait(self, workflow_id: str, *, states: Any = None, timeout: float = 30.0) -> WorkflowInstance:
        """Wait until the workflow is in one of ``states`` (default: ended) and return it."""
        from ledgerflow.client import TERMINAL_STATES

        self.start_worker()
        wanted = TERMINAL_STATES if states is None else states
        return self.client.wait_for_workflow(workflow_id, states=wanted, timeout=timeout, interval=0.05)

    def wait_for_step(self, workflow_id: str, key: str, state: str = "WAITING", timeout: float = 30.0) -> Any:
        """Wait until step ``key`` is in ``state`` (e.g. a TIMER or SIGNAL step WAITING) and return it."""
        from ledgerflow.client import NotFound

        deadline = time.monotonic() + timeout
        while True:
            try:
                step = self.client.get_workflow_step(workflow_id, key).step
            except NotFound:  # not started yet
                step = None
            if step is not None and step.state == state:
                return step
            if time.monotonic() > deadline:
                seen = step.state if step is not None else "not started"
                raise TimeoutError(
                    f"step {key} of workflow {workflow_id} is {seen}, not {state}, after {timeout:g} s"
                )
            time.sleep(0.05)

    # -- time -----------------------------------------------------------------------------------------
    def skip_time(
        self, *, seconds: float = 0, minutes: float = 0, hours: float = 0, days: float = 0
    ) -> dict[str, Any]:
        """Make everything of this namespace that would fall due within the span fall due now (timers,
        retry backoffs, signal timeouts, task and workflow deadlines, schedule fires); returns what moved.
        Paused workflows are left as they are. One call looks at 10,000 open workflows of the namespace;
        with more, it skips again while that moves something."""
        import httpx

        span = seconds + 60 * minutes + 3600 * hours + 86400 * days
        if span <= 0:
            raise ValueError("skip_time needs a positive span, e.g. skip_time(hours=1)")
        while True:
            answer = httpx.post(
                self.url + SKIP_PATH,
                json={"seconds": span},
                headers={"Authorization": f"Bearer {self.token}", KEY_HEADER: self.server.key},
                timeout=30,
            )
            if answer.status_code != 200:
                raise TimeSkippingRefused(f"{answer.status_code}: {answer.text}")
            moved: dict[str, Any] = answer.json()["data"]["skipped"]
            counts = [v for k, v in moved.items() if k not in ("seconds", "more")]
            if not moved.get("more") or not any(counts):  # done, or the rest has nothing within the span
                return moved

    advance = skip_time  # Temporal's word for it

    def note(self, line: str) -> None:
        """Print ``line`` at the end of the test session (with the kit's own figures; also under
        pytest-xdist and without ``-s``): a measured time a test reports without asserting it."""
        self.server.notes.append(line)

    def environ(self) -> dict[str, str]:
        """LEDGERFLOW_URL and LEDGERFLOW_TOKEN of this env: for a script run as a subprocess."""
        return {"LEDGERFLOW_URL": self.url, "LEDGERFLOW_TOKEN": self.token}

    def close(self) -> None:
        """Stop the worker and close the client. The worker's last long poll (at most 1 s) ends in a
        thread of its own, so the next test does not wait for it (its namespace is never used again)."""
        with self._lock:
            running, self._running = self._running, None

        def wind_down() -> None:
            if running is not None:
                running.close()
            self.client.close()

        if running is None:
            wind_down()
        else:
            self.worker.stop()
            thread = threading.Thread(target=wind_down, name="ledgerflow-kit-wind-down", daemon=True)
            thread.start()
            self.server.winding_down.append(thread)


def _root() -> Path:
    """The folder that holds the ``app``, ``web`` and ``ledgerflow`` packages (a checkout or site-packages)."""
    return Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------- the plugin
_SERVERS: list[LedgerflowServer] = []


@pytest.fixture(scope="session")
def ledgerflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LedgerflowServer]:
    """A running Ledgerflow for the test session (see the module's description)."""
    server = LedgerflowServer(tmp_path_factory.mktemp("ledgerflow-kit"))
    server.start()
    _SERVERS.append(server)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ledgerflow_env(
    ledgerflow_server: LedgerflowServer, request: pytest.FixtureRequest
) -> Iterator[LedgerflowEnv]:
    """A namespace of the test's own, with a client, a task worker and time skipping."""
    began = time.monotonic()
    env = ledgerflow_server.environment(request.node.name)
    set_up = time.monotonic() - began
    try:
        yield env
    finally:
        began = time.monotonic()
        env.close()
        ledgerflow_server.timings.tests.append(set_up + time.monotonic() - began)


@pytest.fixture
def ledgerflow_client(ledgerflow_env: LedgerflowEnv) -> Client:
    return ledgerflow_env.client


@pytest.fixture
def ledgerflow_worker(ledgerflow_env: LedgerflowEnv) -> TaskWorker:
    return ledgerflow_env.worker


def _summary_lines() -> list[str]:
    lines = []
    for server in _SERVERS:
        t = server.timings
        per_test = (
            f"{max(t.tests) * 1000:.0f} ms at most, {sum(t.tests) / len(t.tests) * 1000:.0f} ms mean"
            if t.tests
            else "-"
        )
        lines.append(
            f"ledgerflow test kit: first start {t.total:.2f} s (database {t.database:.2f} s, processes "
            f"{t.processes:.2f} s); per-test set-up and tear-down over {len(t.tests)} test(s): {per_test}"
        )
        lines.extend(f"ledgerflow test kit: {note}" for note in server.notes)
    return lines


_FROM_WORKERS: list[str] = []  # pytest-xdist: the lines of the worker processes, printed by the controller


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)  # set in a pytest-xdist worker only
    if workeroutput is not None:
        workeroutput["ledgerflow_test_kit"] = _summary_lines()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    _FROM_WORKERS.extend(getattr(node, "workeroutput", {}).get("ledgerflow_test_kit", []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The kit's start-up and per-test cost (and the tests' ``env.note`` lines), when a test used it."""
    for line in _summary_lines() + _FROM_WORKERS:
        terminalreporter.write_line(line)
