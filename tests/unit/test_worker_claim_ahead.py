"""TaskWorker claims ahead while its tasks are short next to a request (``claim_ahead``), never runs more
than ``concurrency`` at once, claims nothing ahead for long tasks, and hands tasks claimed ahead back at
once when it stops. A fake server in this process (no network, no database): what is asserted is what
the worker asked for and ran, not how fast."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Any

from ledgerflow.sdk_types import CompletionResult, Task
from ledgerflow.worker import TaskWorker

DEADLINE = 60.0


class FakeServer:
    """The task calls of ``TaskApi`` over a list of tasks; each completion request takes ``request_s``."""

    base_url = "fake://"

    def __init__(self, n: int, *, request_s: float = 0.0) -> None:
        self.request_s = request_s
        self.pending = deque(
            Task(id=f"t{i}", queue="q", epoch=1, workflow_id=f"w{i}", step_key="s") for i in range(n)
        )
        self.lock = threading.Condition()
        self.out: set[str] = set()  # claimed, not yet completed or released
        self.most_out = 0
        self.completed: list[str] = []
        self.released: list[str] = []

    def _take(self, n: int) -> list[Task]:
        tasks = [self.pending.popleft() for _ in range(min(n, len(self.pending)))]
        self.out.update(t.id for t in tasks)
        self.most_out = max(self.most_out, len(self.out))
        return tasks

    def claim_tasks(
        self, queues: list[str], *, wait_seconds: int = 0, max_tasks: int = 1, worker: dict | None = None
    ) -> list[Task]:
        with self.lock:
            self.lock.wait_for(lambda: self.pending, timeout=min(wait_seconds, 0.2))
            return self._take(max_tasks)

    def complete_and_claim(
        self,
        completions: list[tuple[str, int, Any]],
        queues: list[str],
        *,
        max_tasks: int = 0,
        idempotency_key: str | None = None,
        worker: dict | None = None,
    ) -> tuple[list[CompletionResult], list[Task]]:
        time.sleep(self.request_s)
        with self.lock:
            results = []
            for task_id, _epoch, _output in completions:
                assert task_id in self.out, f"{task_id} completed twice or never claimed"
                self.out.discard(task_id)
                self.completed.append(task_id)
                results.append(CompletionResult(id=task_id, status=200))
            return results, self._take(max_tasks)

    def heartbeat_task(self, task_id: str, epoch: int) -> Task:
        return Task(id=task_id, queue="q", epoch=epoch, workflow_id="w", step_key="s")

    def release_task(self, task_id: str, epoch: int) -> Task:
        with self.lock:
            self.out.discard(task_id)
            self.released.append(task_id)
            self.lock.notify_all()
        return Task(id=task_id, queue="q", epoch=epoch, workflow_id="w", step_key="s", state="PENDING")

    def complete_task(self, task_id: str, epoch: int, output: Any) -> Task:  # pragma: no cover - unused
        raise AssertionError("the worker completes in batches")

    def fail_task(
        self, task_id: str, epoch: int, message: str, *, retryable: bool, **trace: Any
    ) -> Task:  # pragma: no cover
        raise AssertionError(f"no task fails here: {message}")


class Running:
    """How many task functions run at once, at most."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self.ran: list[str] = []
        self.lock = threading.Lock()

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


def _until(predicate, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < end, what
        time.sleep(0.005)


def test_short_tasks_are_claimed_ahead_and_never_run_more_than_concurrency_at_once() -> None:
    """Instant tasks, requests of 50 ms: the slots would finish many tasks per request, so the worker
    holds up to ``concurrency`` more claimed than it runs (fails before: it held ``concurrency``)."""
    server, running = FakeServer(80, request_s=0.05), Running()
    worker = TaskWorker(server, wait_seconds=1, concurrency=2)

    @worker.task("q")
    def work(task: Task) -> str:
        with running:
            running.ran.append(task.id)
            return "ok"

    with worker.in_background():
        _until(lambda: len(server.completed) == 80, "the tasks were not all completed")
    assert sorted(server.completed) == sorted(f"t{i}" for i in range(80))  # each once
    assert running.most <= 2
    assert server.most_out > 2  # claimed ahead
    assert server.most_out <= 4  # at most concurrency more


def test_async_functions_claimed_ahead_still_run_concurrency_at_once() -> None:
    server, running = FakeServer(60, request_s=0.05), Running()
    worker = TaskWorker(server, wait_seconds=1, concurrency=3)

    @worker.task("q")
    async def work(task: Task) -> str:
        with running:
            await asyncio.sleep(0)
            return "ok"

    with worker.in_background():
        _until(lambda: len(server.completed) == 60, "the tasks were not all completed")
    assert running.most <= 3
    assert 3 < server.most_out <= 6


def test_long_tasks_are_not_claimed_ahead() -> None:
    """Tasks of 300 ms next to instant requests: the slots finish nothing during a request, so the worker
    claims only for its slots (the tasks stay in the queue for other workers)."""
    server, running = FakeServer(8), Running()
    worker = TaskWorker(server, wait_seconds=1, concurrency=2)

    @worker.task("q")
    def work(task: Task) -> str:
        with running:
            time.sleep(0.3)
            return "ok"

    with worker.in_background():
        _until(lambda: len(server.completed) == 8, "the tasks were not all completed")
    assert server.most_out <= 2


def test_claim_ahead_off_claims_only_for_the_slots() -> None:
    server = FakeServer(40, request_s=0.05)
    worker = TaskWorker(server, wait_seconds=1, concurrency=2, claim_ahead=False)
    worker.register("q", lambda task: "ok")
    with worker.in_background():
        _until(lambda: len(server.completed) == 40, "the tasks were not all completed")
    assert server.most_out <= 2


def test_stop_hands_back_tasks_claimed_ahead_at_once_without_running_them() -> None:
    """One slot, busy with a task that waits for the test; a task claimed ahead waits behind it. ``stop()``
    hands that one back while the slot is still busy (not after the grace), and it never runs."""
    server = FakeServer(60, request_s=0.05)
    worker = TaskWorker(server, wait_seconds=1, concurrency=1, shutdown_grace_seconds=DEADLINE)
    blocking, may_end, ran = threading.Event(), threading.Event(), []

    @worker.task("q")
    def work(task: Task) -> str:
        ran.append(task.id)
        if len(ran) == 40:  # the means are known by now: the worker claims ahead
            blocking.set()
            may_end.wait(DEADLINE)
        return "ok"

    serving = threading.Thread(target=worker.run)
    serving.start()
    try:
        assert blocking.wait(DEADLINE)
        waiting = lambda: [t for t in list(server.out) if t not in ran]  # noqa: E731 - claimed, not run
        _until(lambda: len(waiting()) == 1, "no task was claimed ahead behind the busy slot")
        [ahead] = waiting()
        worker.stop()
        _until(lambda: ahead in server.released, "the task claimed ahead was not handed back at once")
        assert ahead not in ran
    finally:
        may_end.set()
        serving.join(DEADLINE)
    assert not serving.is_alive()
    assert ran[-1] in server.completed  # the running task still finished inside the grace
    assert ahead not in ran and ahead not in server.completed
