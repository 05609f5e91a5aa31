"""``TaskWorker``: runs your Python functions for task queues (claim -> heartbeat -> complete/fail).

The worker talks to the server through any object with the task calls of
``ledgerflow.client.Client`` (``claim_tasks``, ``heartbeat_task``, ``complete_task``, ``fail_task``);
it does not import the client module, which re-exports this one.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ledgerflow.sdk_types import ServerUnreachable, StateConflict, Task, Unavailable

log = logging.getLogger("ledgerflow.worker")

TaskFunction = Callable[[Task], Any]


class NonRetryableError(Exception):
    """Raise from a task function to fail the task without a retry."""


class TaskApi(Protocol):
    """The calls a TaskWorker needs (``ledgerflow.client.Client`` has them)."""

    base_url: str

    def claim_tasks(self, queues: list[str], *, wait_seconds: int = 0, max_tasks: int = 1) -> list[Task]: ...

    def heartbeat_task(self, task_id: str, epoch: int) -> Task: ...

    def complete_task(self, task_id: str, epoch: int, output: Any) -> Task: ...

    def fail_task(self, task_id: str, epoch: int, message: str, *, retryable: bool) -> Task: ...


def _short(ident: str | None) -> str:
    return (ident or "?")[:8]


def _ensure_log_output() -> None:
    """When the program configured no logging, print the worker's lines (INFO) to stderr."""
    pkg = logging.getLogger("ledgerflow")
    if logging.getLogger().handlers or pkg.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    pkg.addHandler(handler)
    pkg.setLevel(logging.INFO)
    pkg.propagate = False


@dataclass
class TaskWorker:
    """Runs your functions for queues: claim -> heartbeat while running -> complete / fail.

    worker = TaskWorker(client)

    @worker.task("approvals")          # decorator style
    def approve(task):                 # task.input, task.workflow_id, task.step_key, task.epoch
        return {"approved": True}      # the step's output

    worker.register("stock", reserve)  # or plain registration (or TaskWorker(client, functions={...}))

    worker.run()                       # until worker.stop(), SIGTERM handling of your own, or Ctrl-C
    with worker.in_background(): ...  # or in a thread while your code starts and watches workflows

    Each task logs one line (logger ``ledgerflow.worker``), e.g.
    ``approvals: task 3f2c1a9b (step approve, workflow 9a8b7c6d) completed in 12 ms``.
    Raise ``NonRetryableError`` to fail a task without retry; any other exception fails it as
    retryable (the step's ``retry`` policy decides).
    """

    client: TaskApi
    wait_seconds: int = 10
    heartbeat_seconds: float | None = None  # default: a third of the lease
    functions: dict[str, TaskFunction] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def task(self, queue: str) -> Callable[[TaskFunction], TaskFunction]:
        """Decorator: run the function for every task of ``queue``."""

        def deco(fn: TaskFunction) -> TaskFunction:
            self.register(queue, fn)
            return fn

        return deco

    def register(self, queue: str, fn: TaskFunction) -> None:
        """Run ``fn`` for every task of ``queue`` (the same as the decorator)."""
        if not callable(fn):
            raise TypeError(f"the function for queue {queue!r} is not callable")
        self.functions[queue] = fn

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Claim and run tasks until ``stop()``. An unreachable or unavailable server is logged (with
        its URL) and retried; any other error (e.g. a revoked token) ends the loop with that error."""
        if not self.functions:
            raise ValueError("no task functions: register one with @worker.task(queue)")
        _ensure_log_output()
        self._stop.clear()
        log.info(
            "task worker ready: queues %s at %s",
            ", ".join(sorted(self.functions)),
            getattr(self.client, "base_url", "?"),
        )
        while not self._stop.is_set():
            try:
                self.run_once()
            except (ServerUnreachable, Unavailable) as exc:
                log.warning("%s; retrying in 1 s", exc)
                self._stop.wait(1.0)

    @contextmanager
    def in_background(self) -> Iterator[TaskWorker]:
        """Run the worker in a thread for the duration of a ``with`` block. A first claim happens
        before the block starts, so a wrong token or URL raises here rather than in the thread."""
        if not self.functions:
            raise ValueError("no task functions: register one with @worker.task(queue)")
        _ensure_log_output()
        self.run_once(wait_seconds=0)
        failure: list[BaseException] = []

        def loop() -> None:
            try:
                self.run()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller at the end of the block
                failure.append(exc)
                log.error("task worker stopped: %s", exc)

        thread = threading.Thread(target=loop, name="ledgerflow-task-worker", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stop()
            thread.join(self.wait_seconds + 5)
        if failure:
            raise failure[0]

    def run_once(self, wait_seconds: int | None = None) -> int:
        """Claim at most one task and run it; returns how many tasks ran."""
        tasks = self.client.claim_tasks(
            sorted(self.functions), wait_seconds=self.wait_seconds if wait_seconds is None else wait_seconds
        )
        for t in tasks:
            self._execute(t)
        return len(tasks)

    def _execute(self, t: Task) -> None:
        label = f"{t.queue}: task {_short(t.id)} (step {t.step_key}, workflow {_short(t.workflow_id)}"
        if t.attempt and t.attempt > 1:
            label += f", attempt {t.attempt}"
        if t.poll_round is not None:
            label += f", round {t.poll_round}"
        label += ")"
        log.debug("%s claimed (epoch %s)", label, t.epoch)
        started = time.monotonic()
        done = threading.Event()
        interval = self.heartbeat_seconds
        if interval is None and t.lease_expires_at is not None:
            interval = max(
                0.2, (t.lease_expires_at - datetime.now(t.lease_expires_at.tzinfo)).total_seconds() / 3
            )

        def beat() -> None:
            while not done.wait(interval or 10.0):
                try:
                    self.client.heartbeat_task(t.id, t.epoch)
                except StateConflict:
                    log.warning("%s: lease lost (epoch %s)", label, t.epoch)
                    return
                except Exception as exc:  # noqa: BLE001 - keep beating
                    log.warning("%s: heartbeat failed: %s", label, exc)

        def took() -> str:
            return f"{(time.monotonic() - started) * 1000:.0f} ms"

        hb = threading.Thread(target=beat, daemon=True)
        hb.start()
        try:
            output = self.functions[t.queue](t)
        except Exception as exc:  # noqa: BLE001 - the task fails, the worker goes on
            done.set()
            retryable = not isinstance(exc, NonRetryableError)
            message = f"{type(exc).__name__}: {exc}"[:4000]
            try:
                self.client.fail_task(t.id, t.epoch, message, retryable=retryable)
            except StateConflict:
                log.warning(
                    "%s failed in %s, but the failure was refused (epoch %s is stale)", label, took(), t.epoch
                )
                return
            kind = "retryable" if retryable else "not retryable"
            log.info("%s failed in %s (%s): %s", label, took(), kind, message)
            return
        done.set()
        try:
            self.client.complete_task(t.id, t.epoch, output)
        except StateConflict:
            log.warning(
                "%s finished in %s, but the result was refused (epoch %s is stale)", label, took(), t.epoch
            )
            return
        log.info("%s completed in %s", label, took())
