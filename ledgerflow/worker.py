"""``TaskWorker``: runs decorated Python functions for task queues (claim -> heartbeat -> complete/fail)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from ledgerflow.client import Client
from ledgerflow.sdk_types import StateConflict, Task, Unavailable

log = logging.getLogger("ledgerflow.worker")


# --------------------------------------------------------------------------- worker
class NonRetryableError(Exception):
    """Raise from a task function to fail the task without a retry."""


@dataclass
class TaskWorker:
    """Runs decorated functions for queues: claim -> heartbeat while running -> complete / fail.

    worker = TaskWorker(client)

    @worker.task("approvals")
    def approve(task):          # task.input, task.workflow_id, task.step_key, task.epoch
        return {"approved": True}

    worker.run()                # until worker.stop() or Ctrl-C
    """

    client: Client
    wait_seconds: int = 10
    heartbeat_seconds: float | None = None  # default: a third of the lease
    functions: dict[str, Callable[[Task], Any]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def task(self, queue: str) -> Callable[[Callable[[Task], Any]], Callable[[Task], Any]]:
        def deco(fn: Callable[[Task], Any]) -> Callable[[Task], Any]:
            self.functions[queue] = fn
            return fn

        return deco

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except (httpx.TransportError, Unavailable) as exc:
                log.warning("task worker: %s; retrying", exc)
                self._stop.wait(1.0)

    def run_once(self, wait_seconds: int | None = None) -> int:
        """Claim at most one task and run it; returns how many tasks ran."""
        tasks = self.client.claim_tasks(
            sorted(self.functions), wait_seconds=self.wait_seconds if wait_seconds is None else wait_seconds
        )
        for t in tasks:
            self._execute(t)
        return len(tasks)

    def _execute(self, t: Task) -> None:
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
                    log.warning("task %s: lease lost (epoch %s)", t.id, t.epoch)
                    return
                except Exception as exc:  # noqa: BLE001 - keep beating
                    log.warning("task %s: heartbeat failed: %s", t.id, exc)

        hb = threading.Thread(target=beat, daemon=True)
        hb.start()
        try:
            output = self.functions[t.queue](t)
        except Exception as exc:  # noqa: BLE001 - the task fails, the worker goes on
            done.set()
            try:
                self.client.fail_task(
                    t.id,
                    t.epoch,
                    f"{type(exc).__name__}: {exc}"[:4000],
                    retryable=not isinstance(exc, NonRetryableError),
                )
            except StateConflict:
                log.warning("task %s: failure refused (epoch %s is stale)", t.id, t.epoch)
            return
        done.set()
        try:
            self.client.complete_task(t.id, t.epoch, output)
        except StateConflict:
            log.warning("task %s: result refused (epoch %s is stale)", t.id, t.epoch)
