"""``TaskWorker``: runs your Python functions for task queues, up to ``concurrency`` tasks at once.

One worker is a few threads around your functions:

- the **claimer** (the thread that calls ``run()``) long-polls ``POST /v1/tasks/claim`` for as many
  tasks as it has free slots (at most 16 per claim) and hands each to a slot;
- **slots**: ``concurrency`` threads for plain functions; ``async def`` functions run as tasks of one
  asyncio event loop (the worker's own thread, or the caller's loop with ``run_async()``), limited by
  the same ``concurrency``;
- **claiming ahead**: while tasks are short next to a round trip to the server, the worker holds up to
  ``concurrency`` more claimed tasks than it runs, so that a slot that frees starts the next task at
  once instead of waiting for the completion request that claims it (see ``TaskWorker``);
- **reporters** (one, and up to 4 side by side at higher ``concurrency``) send results as they come:
  completions in batches (``POST /v1/tasks/complete``, up to 16 per request, each item answered on
  its own), failures one by one. A slot is free again as
  soon as its function returns; it does not wait for the server's answer;
- the **heartbeater** keeps the lease of every task in flight alive, all from this one thread; a
  heartbeat refused with 409 means the lease is lost (the task expired, was re-claimed, cancelled or
  timed out): an ``async`` function is cancelled, and the result of a plain one is not sent.

The worker talks to the server through any object with the task calls of
``ledgerflow.client.Client`` (see ``TaskApi``); it does not import the client module, which re-exports
this one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import queue
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ledgerflow.sdk_types import (
    ApiError,
    CompletionResult,
    InvalidArgument,
    NotFound,
    RateLimited,
    ServerUnreachable,
    StateConflict,
    Task,
    Unavailable,
    _dumps,
)

log = logging.getLogger("ledgerflow.worker")

TaskFunction = Callable[[Task], Any] | Callable[[Task], Awaitable[Any]]

MAX_CLAIM = 16  # the protocol's max_tasks per claim (X-TASK)
MAX_BATCH = 16  # completions per POST /v1/tasks/complete
MAX_OUTPUT_BYTES = 256 * 1024  # a task's output (X-TASK, like a workflow input)
BATCH_BYTES = 448 * 1024  # a completion request stays under the API's 512 KiB body limit
SMOOTHING = 0.2  # weight of the newest sample in the running means of task and request times
MAX_REPORTERS = 4  # result requests in flight at once
FLUSH_SECONDS = 5.0  # after the grace, how long results still waiting may take to go out
_PASSING = (ServerUnreachable, Unavailable, RateLimited)  # clears by itself: try again
# A failure's trace (issue 47): the exception's type (module-qualified) and its formatted stack trace, at most
# MAX_STACK_CHARS characters: a longer one keeps its first STACK_HEAD_CHARS and its end (the innermost frames
# and the exception line), with a line that says how much was left out.
MAX_TYPE_CHARS = 256
MAX_STACK_CHARS = 16 * 1024
STACK_HEAD_CHARS = 2 * 1024


def _sdk_version() -> str:
    try:
        from importlib.metadata import version

        return version("ledgerflow")
    except Exception:  # not installed as a distribution (a source checkout)
        return "unknown"


def identity() -> dict[str, Any]:
    """Who runs the tasks: ``{"host", "pid", "sdk"}``, sent with every claim and failure (the server keeps
    it on the attempt, so a failure can be traced to a machine and a process)."""
    return {
        "host": (socket.gethostname() or "unknown")[:255],
        "pid": os.getpid(),
        "sdk": f"ledgerflow-python/{_sdk_version()}"[:64],
    }


def exception_type(exc: BaseException) -> str:
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return name[:MAX_TYPE_CHARS]


def bounded_stack(exc: BaseException) -> str:
    """The exception's formatted traceback, bounded to ``MAX_STACK_CHARS`` (see above)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(text) <= MAX_STACK_CHARS:
        return text
    marker = "\n... ({} characters left out) ...\n"
    tail = MAX_STACK_CHARS - STACK_HEAD_CHARS - len(marker.format(len(text)))
    return text[:STACK_HEAD_CHARS] + marker.format(len(text) - STACK_HEAD_CHARS - tail) + text[-tail:]


class NonRetryableError(Exception):
    """Raise from a task function to fail the task without a retry."""


class TaskApi(Protocol):
    """The calls a TaskWorker needs (``ledgerflow.client.Client`` has them)."""

    base_url: str

    def claim_tasks(
        self,
        queues: list[str],
        *,
        wait_seconds: int = 0,
        max_tasks: int = 1,
        worker: dict[str, Any] | None = None,
    ) -> list[Task]: ...

    def heartbeat_task(self, task_id: str, epoch: int) -> Task: ...

    def complete_and_claim(
        self,
        completions: list[tuple[str, int, Any]],
        queues: list[str],
        *,
        max_tasks: int = 0,
        idempotency_key: str | None = None,
        worker: dict[str, Any] | None = None,
    ) -> tuple[list[CompletionResult], list[Task]]: ...

    def complete_task(self, task_id: str, epoch: int, output: Any) -> Task: ...

    def fail_task(
        self,
        task_id: str,
        epoch: int,
        message: str,
        *,
        retryable: bool,
        exc_type: str | None = None,
        stack: str | None = None,
        worker: dict[str, Any] | None = None,
    ) -> Task: ...

    def release_task(self, task_id: str, epoch: int) -> Task: ...


_NOT_STARTED = object()  # an async task claimed ahead that was handed back before it started


def _mean(mean: float | None, sample: float) -> float:
    """A running mean that follows the recent samples (``SMOOTHING``)."""
    return sample if mean is None else mean + SMOOTHING * (sample - mean)


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


def is_async(fn: Callable[..., Any]) -> bool:
    """``async def`` functions (also behind ``functools.partial`` or as an ``async def __call__``)."""
    call = type(fn).__call__ if not inspect.isroutine(fn) else None
    return inspect.iscoroutinefunction(fn) or (call is not None and inspect.iscoroutinefunction(call))


@dataclass(eq=False)
class _Flight:
    """One claimed task, from its claim until the server has its result (or it was given up)."""

    task: Task
    label: str
    interval: float
    next_beat: float
    started: float = field(default_factory=time.monotonic)  # claimed
    began: float | None = None  # its function started (a task claimed ahead waits for a slot until then)
    ended: float | None = None  # when the function returned or raised
    dropped: bool = False  # never started, and no longer counted (handed back, or its lease lost)
    lost: bool = False  # a heartbeat was refused: the result will be refused too
    released: bool = False  # handed back at shutdown
    future: concurrent.futures.Future[Any] | None = None  # an async function's run on the loop
    # held during a heartbeat: a release waits for it (a heartbeat that started before the release
    # committed would otherwise renew the lease the release just ended: both use the transaction's now())
    beating: threading.Lock = field(default_factory=threading.Lock)

    def took(self) -> str:
        return f"{((self.ended or time.monotonic()) - (self.began or self.started)) * 1000:.0f} ms"


@dataclass
class _Outcome:
    flight: _Flight
    output: Any = None
    error: str | None = None  # set: the task failed
    retryable: bool = True
    exc_type: str | None = None  # the failure's exception type and bounded stack trace
    stack: str | None = None
    size: int = 0  # the output's bytes of JSON
    key: str = field(default_factory=lambda: uuid.uuid4().hex)  # the same key for every resend
    holds_slot: bool = False  # a completion whose slot its report refills (see TaskWorker._refills)


class TaskWorker:
    """Runs your functions for queues: claim -> heartbeat while running -> complete / fail.

    worker = TaskWorker(client, concurrency=8)   # up to 8 tasks at once (default 1)

    @worker.task("approvals")          # decorator style
    def approve(task):                 # task.input, task.workflow_id, task.step_key, task.epoch
        return {"approved": True}      # the step's output

    @worker.task("emails")             # async def functions run on one asyncio event loop
    async def send(task): ...

    worker.register("stock", reserve)  # or plain registration (or TaskWorker(client, functions={...}))

    worker.run()                       # until worker.stop() (e.g. from a SIGTERM handler) or Ctrl-C
    await worker.run_async()           # the same inside asyncio: async functions run on your loop
    with worker.in_background(): ...  # or in a thread while your code starts and watches workflows

    Each task logs one line (logger ``ledgerflow.worker``), e.g.
    ``approvals: task 3f2c1a9b (step approve, workflow 9a8b7c6d) completed in 12 ms``.
    Raise ``NonRetryableError`` to fail a task without retry; any other exception fails it as
    retryable (the step's ``retry`` policy decides).

    ``concurrency`` (default 1, so that functions written for one task at a time stay correct):
    how many tasks run at once; with more than one, plain functions run in that many threads and
    must be thread-safe. ``stop()`` stops claiming at once; tasks still running get
    ``shutdown_grace_seconds`` (default 20) to finish and be reported; those still running then are
    handed back to their queue (``POST /v1/tasks/{id}/release``: due again at once, no attempt
    counted), and their ``async`` functions are cancelled.

    ``claim_ahead`` (default True): a slot that frees would otherwise wait one round trip (the
    completion request that claims its next task) before it runs again, which bounds a worker of
    short tasks to ``concurrency`` tasks per round trip. The worker keeps running means of how long
    its functions take and how long a completion request takes, and claims up to
    ``concurrency * request time / function time`` tasks more than it runs (at most ``concurrency``
    more): as many as its slots finish during one request. Tasks that take long next to a request
    (a second against a few milliseconds) are never claimed ahead, so they stay in the queue for
    other workers. A task claimed ahead is CLAIMED on the server, heartbeaten like a running one, and
    handed back at once by ``stop()``; ``concurrency`` still bounds what runs at once.
    """

    def __init__(
        self,
        client: TaskApi,
        wait_seconds: int = 10,
        heartbeat_seconds: float | None = None,
        functions: dict[str, TaskFunction] | None = None,
        *,
        concurrency: int = 1,
        shutdown_grace_seconds: float = 20.0,
        claim_ahead: bool = True,
    ) -> None:
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer of at least 1, not {concurrency!r}")
        if not 0 <= wait_seconds <= 30:
            raise ValueError(
                f"wait_seconds must be from 0 to 30 (the claim's long poll), not {wait_seconds!r}"
            )
        self.client = client
        self.wait_seconds = wait_seconds
        self.heartbeat_seconds = heartbeat_seconds  # default: a third of the lease
        self.concurrency = concurrency
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self.claim_ahead = claim_ahead
        self.identity = identity()  # host, pid, SDK: sent with each claim and failure
        self.functions: dict[str, TaskFunction] = {}
        for queue_name, fn in (functions or {}).items():
            self.register(queue_name, fn)
        self._stop = threading.Event()
        self._stop_at: float | None = None
        self._cond = threading.Condition()
        self._flights: dict[tuple[str, int], _Flight] = {}
        self._busy = 0  # functions running (claimed and not yet returned)
        self._unreported = 0  # results waiting for the reporter
        self._claiming = 0  # slots a claim in flight asked tasks for
        self._refills = 0  # free slots kept for the report of the completion that freed them
        self._refill_ok = True  # False: the server takes no ``claim`` with completions (or run_once)
        self._outcomes: queue.Queue[_Outcome | None] = queue.Queue()
        self._slot_queue: queue.Queue[_Flight | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._helpers_stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._own_loop = False
        self._fatal: BaseException | None = None
        self._run_s: float | None = None  # running mean of a function's time (successful tasks)
        self._request_s: float | None = None  # running mean of a completion request's time
        self._async_slots: asyncio.Semaphore | None = None

    # -- registration ------------------------------------------------------------------------
    def task(self, queue: str) -> Callable[[TaskFunction], TaskFunction]:
        """Decorator: run the function for every task of ``queue``."""

        def deco(fn: TaskFunction) -> TaskFunction:
            self.register(queue, fn)
            return fn

        return deco

    def register(self, queue: str, fn: TaskFunction) -> None:
        """Run ``fn`` (a plain or an ``async def`` function) for every task of ``queue``."""
        if not callable(fn):
            raise TypeError(f"the function for queue {queue!r} is not callable")
        self.functions[queue] = fn

    # -- running -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop claiming now; running tasks get ``shutdown_grace_seconds`` to finish (see the class).
        Safe to call from a signal handler or another thread."""
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        """Claim and run tasks until ``stop()``. An unreachable or unavailable server is logged (with
        its URL) and retried; any other error (e.g. a revoked token) ends the loop with that error,
        after the tasks in flight were finished or handed back."""
        self._begin(None)
        self._serve()

    async def run_async(self) -> None:
        """``run()`` for asyncio programs: ``async def`` task functions run on the running loop; the
        HTTP calls and plain functions run in the worker's threads. Cancelling the awaiting task
        stops the worker (the same clean shutdown as ``stop()``)."""
        self._begin(asyncio.get_running_loop())
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def serve() -> None:
            try:
                self._serve()
                done.set_result(None)
            except BaseException as exc:  # handed to the awaiting task
                done.set_exception(exc)

        threading.Thread(target=serve, name="ledgerflow-task-claimer", daemon=True).start()
        served = asyncio.wrap_future(done)
        try:
            await asyncio.shield(served)
        except asyncio.CancelledError:
            self.stop()
            await served  # the shutdown needs this loop for the async tasks still running
            raise

    @contextmanager
    def in_background(self) -> Iterator[TaskWorker]:
        """Run the worker in a thread for the duration of a ``with`` block. A first claim happens
        before the block starts, so a wrong token or URL raises here rather than in the thread."""
        self._begin(None)
        try:
            self._claim_once(0)
        except BaseException:
            self.stop()
            self._end()
            raise
        failure: list[BaseException] = []

        def loop() -> None:
            try:
                self._serve()
            except BaseException as exc:  # handed to the caller at the end of the block
                failure.append(exc)
                log.error("task worker stopped: %s", exc)

        thread = threading.Thread(target=loop, name="ledgerflow-task-worker", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stop()
            thread.join(self.wait_seconds + self.shutdown_grace_seconds + 15)
        if failure:
            raise failure[0]

    def run_once(self, wait_seconds: int | None = None) -> int:
        """Claim once (for every free slot), run those tasks, report them, return how many ran."""
        self._begin(None)
        self._refill_ok = False  # exactly one claim
        try:
            n = self._claim_once(self.wait_seconds if wait_seconds is None else wait_seconds)
            with self._cond:
                self._cond.wait_for(lambda: not self._flights)
        finally:
            self.stop()
            self._end()
        self._raise_fatal()
        return n

    # -- the claimer --------------------------------------------------------------------------
    def _serve(self) -> None:
        interrupted = False
        try:
            self._claim_loop()
        except KeyboardInterrupt:
            interrupted = True
            self.stop()
        except BaseException as exc:
            self._fatal = self._fatal or exc
            self.stop()
        finally:
            self._end()
        if interrupted:
            raise KeyboardInterrupt
        self._raise_fatal()

    def _raise_fatal(self) -> None:
        fatal, self._fatal = self._fatal, None
        if fatal is not None:
            raise fatal

    def _claim_loop(self) -> None:
        log.info(
            "task worker ready: queues %s at %s%s",
            ", ".join(sorted(self.functions)),
            getattr(self.client, "base_url", "?"),
            f" ({self.concurrency} at a time)" if self.concurrency > 1 else "",
        )
        while not self._stop.is_set():
            with self._cond:
                self._cond.wait_for(
                    lambda: self._stop.is_set() or self._fatal is not None or self._has_room()
                )
                if self._stop.is_set() or self._fatal is not None:
                    return
            try:
                self._claim_once(self.wait_seconds)
            except _PASSING as exc:
                log.warning("%s; retrying in 1 s", exc)
                self._stop.wait(1.0)

    def _ahead(self) -> int:
        """How many tasks to hold claimed beyond the slots: as many as the slots finish during one
        completion request, at most ``concurrency`` (none before both times were measured)."""
        run, request = self._run_s, self._request_s
        if not self.claim_ahead or run is None or request is None:
            return 0
        return min(self.concurrency, int(self.concurrency * request / max(run, 1e-6)))

    def _free(self) -> int:
        """Room that no task (running or claimed ahead), claim in flight or pending refill holds (under
        ``_cond``)."""
        return self.concurrency + self._ahead() - self._busy - self._claiming - self._refills

    def _has_room(self) -> bool:
        # results waiting for the server count too, so that an outage never piles up claimed work
        return self._free() > 0 and self._unreported < max(self.concurrency, MAX_BATCH)

    def _claim_once(self, wait_seconds: int) -> int:
        with self._cond:
            free = min(self._free(), MAX_CLAIM)
            if free <= 0:
                return 0
            self._claiming += free
        try:
            tasks = self.client.claim_tasks(
                sorted(self.functions), wait_seconds=wait_seconds, max_tasks=free, worker=self.identity
            )
            for t in tasks:
                self._dispatch(t)
        finally:
            with self._cond:
                self._claiming -= free
                self._cond.notify_all()
        return len(tasks)

    def _dispatch(self, t: Task) -> None:
        label = f"{t.queue}: task {_short(t.id)} (step {t.step_key}, workflow {_short(t.workflow_id)}"
        if t.attempt and t.attempt > 1:
            label += f", attempt {t.attempt}"
        if t.poll_round is not None:
            label += f", round {t.poll_round}"
        label += ")"
        interval = self.heartbeat_seconds
        if interval is None:
            interval = 10.0
            if t.lease_expires_at is not None:
                left = (t.lease_expires_at - datetime.now(t.lease_expires_at.tzinfo)).total_seconds()
                interval = max(0.2, left / 3)
        flight = _Flight(t, label, interval, time.monotonic() + interval)
        if self._stop.is_set():  # claimed by a long poll that ended after stop(): hand it back now
            self._release(flight)
            return
        log.debug("%s claimed (epoch %s)", label, t.epoch)
        fn = self.functions[t.queue]
        with self._cond:
            self._flights[(t.id, t.epoch)] = flight
            self._busy += 1
            self._cond.notify_all()
        if is_async(fn):
            assert self._loop is not None
            flight.future = asyncio.run_coroutine_threadsafe(self._call_async(fn, flight), self._loop)
            flight.future.add_done_callback(lambda f: self._async_done(flight, f))
        else:
            self._slot_queue.put(flight)

    # -- slots -------------------------------------------------------------------------------
    def _may_begin(self, flight: _Flight) -> bool:
        """Whether a slot starts ``flight`` now: not once the worker stops (``_end`` hands back a task
        claimed ahead), nor one whose lease was lost while it waited (no longer counted, then)."""
        with self._cond:
            if self._stop.is_set() or flight.dropped:
                return False
            if flight.lost or flight.released:
                self._drop(flight)
                return False
            flight.began = time.monotonic()
            return True

    def _drop(self, flight: _Flight) -> None:
        """A flight that never started is no longer counted (under ``_cond``)."""
        flight.dropped = True
        self._busy -= 1
        self._flights.pop((flight.task.id, flight.task.epoch), None)
        self._cond.notify_all()

    def _slot(self) -> None:
        while True:
            flight = self._slot_queue.get()
            if flight is None:
                return
            if not self._may_begin(flight):
                continue
            try:
                output = self.functions[flight.task.queue](flight.task)
                if inspect.isawaitable(output):
                    if inspect.iscoroutine(output):
                        output.close()
                    raise TypeError("the function returned an awaitable: declare it with `async def`")
            except Exception as exc:  # the task fails, the worker goes on
                self._finished(flight, error=exc)
            else:
                self._finished(flight, output=output)

    async def _call_async(self, fn: Callable[[Task], Awaitable[Any]], flight: _Flight) -> Any:
        assert self._async_slots is not None
        async with self._async_slots:  # ``concurrency`` at once, tasks claimed ahead included
            if not self._may_begin(flight):
                return _NOT_STARTED
            return await fn(flight.task)

    def _async_done(self, flight: _Flight, fut: concurrent.futures.Future[Any]) -> None:
        if flight.dropped or (
            not fut.cancelled() and fut.exception() is None and fut.result() is _NOT_STARTED
        ):
            return  # never started: ``_end`` or ``_may_begin`` counted it out
        if fut.cancelled():
            self._finished(flight, error=None, cancelled=True)
            return
        exc = fut.exception()
        if exc is None:
            self._finished(flight, output=fut.result())
        elif isinstance(exc, Exception):
            self._finished(flight, error=exc)
        else:  # CancelledError raised by the function itself, KeyboardInterrupt...
            self._finished(flight, error=None, cancelled=True)

    def _finished(
        self,
        flight: _Flight,
        *,
        output: Any = None,
        error: BaseException | None = None,
        cancelled: bool = False,
    ) -> None:
        if flight.dropped:  # a task claimed ahead, handed back before it started
            return
        flight.ended = time.monotonic()
        if error is None and not cancelled and flight.began is not None:
            self._run_s = _mean(self._run_s, flight.ended - flight.began)
        outcome: _Outcome | None = None
        if flight.lost or flight.released or cancelled:
            why = (
                "its lease was lost"
                if flight.lost
                else "it was handed back"
                if flight.released
                else "cancelled"
            )
            log.warning("%s ended in %s after %s; its result is not sent", flight.label, flight.took(), why)
        elif error is not None:
            outcome = _Outcome(
                flight,
                error=f"{type(error).__name__}: {error}"[:4000],
                retryable=not isinstance(error, NonRetryableError),
                exc_type=exception_type(error),
                stack=bounded_stack(error),
            )
        else:
            outcome = self._checked_output(flight, output)
        with self._cond:
            self._busy -= 1
            if outcome is None:
                self._flights.pop((flight.task.id, flight.task.epoch), None)
            else:
                self._unreported += 1
                if outcome.error is None and self._refill_ok and not self._stop.is_set():
                    # the slot waits for this completion's request, which claims a task for it
                    outcome.holds_slot = True
                    self._refills += 1
            self._cond.notify_all()
        if outcome is not None:
            self._outcomes.put(outcome)

    @staticmethod
    def _checked_output(flight: _Flight, output: Any) -> _Outcome:
        """A result the server can take, or a failure (not retryable: the same code returns the same)."""
        try:
            size = len(_dumps(output).encode("utf-8", "surrogatepass"))
        except (TypeError, ValueError) as exc:
            return _Outcome(flight, error=f"the output is not JSON: {exc}", retryable=False)
        if size > MAX_OUTPUT_BYTES:
            return _Outcome(
                flight,
                error=f"the output is {size} bytes of JSON; at most {MAX_OUTPUT_BYTES}",
                retryable=False,
            )
        return _Outcome(flight, output=output, size=size)

    # -- the reporter ------------------------------------------------------------------------
    def _reporter(self) -> None:
        carry: list[_Outcome] = []
        refill, key = 0, ""
        while True:
            resend = bool(carry)  # then the same key and the same claim: the server answers its tasks again
            batch = carry or self._next_outcomes()
            carry = []
            if batch is None:
                return
            live = [o for o in batch if not (o.flight.lost or o.flight.released)]
            for o in batch:
                if o not in live:
                    log.warning("%s: its lease was lost before the result was sent", o.flight.label)
                    self._reported(o)
            done = [o for o in live if o.error is None]
            failed = [o for o in live if o.error is not None]
            if not resend and done:
                refill, key = min(MAX_CLAIM, sum(1 for o in done if o.holds_slot)), done[0].key
            try:
                if done:
                    self._send_completions(done, refill, key)
                for o in failed:
                    self._send_failure(o)
            except _PASSING as exc:
                if self._helpers_stop.is_set():
                    for o in live:
                        log.error("%s: result not sent (%s)", o.flight.label, exc)
                        self._reported(o)
                    continue
                log.warning("%s; sending %d results again in 1 s", exc, len(live))
                carry = [o for o in live if (o.flight.task.id, o.flight.task.epoch) in self._flights]
                self._helpers_stop.wait(1.0)
            except Exception as exc:  # e.g. a revoked token: the worker stops with it
                for o in live:
                    log.error("%s: result not sent: %s", o.flight.label, exc)
                    self._reported(o)
                self._fatal = self._fatal or exc
                self.stop()

    def _reporters(self) -> int:
        """Result requests in flight at once: the server completes the items of one request one after
        the other, so a busy worker sends a few requests side by side (one at concurrency 1)."""
        return min(MAX_REPORTERS, self.concurrency)

    def _next_outcomes(self) -> list[_Outcome] | None:
        """Whatever results are waiting now (at least one), at most one request's worth."""
        first = self._outcomes.get()
        if first is None:
            return None
        batch, size = [first], 0
        while len(batch) < MAX_BATCH:
            try:
                nxt = self._outcomes.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                self._outcomes.put(None)  # keep the end mark for the next round
                break
            batch.append(nxt)
        out: list[_Outcome] = []
        rest: list[_Outcome] = []
        for o in batch:  # completions share a request up to its size; the rest waits for the next one
            n = 0 if o.error is not None else o.size + 200
            if out and size + n > BATCH_BYTES:
                rest.append(o)
            else:
                out.append(o)
                size += n
        for o in rest:
            self._outcomes.put(o)
        return out

    def _send_completions(self, done: list[_Outcome], refill: int, key: str) -> None:
        """Complete ``done`` in one request that also claims ``refill`` tasks for the slots they freed."""
        items = [(o.flight.task.id, o.flight.task.epoch, o.output) for o in done]
        if self._stop.is_set() or not self._refill_ok:
            refill = 0
        sent = time.monotonic()
        try:
            results, claimed = self.client.complete_and_claim(
                items, sorted(self.functions), max_tasks=refill, idempotency_key=key, worker=self.identity
            )
            self._request_s = _mean(self._request_s, time.monotonic() - sent)
        except InvalidArgument as exc:
            if refill and any(str(e.get("field", "")).startswith("claim") for e in exc.errors):
                log.info("the server takes no claim with completions: this worker claims separately")
                self._refill_ok = False  # a server of an earlier release
                self._send_completions(done, 0, key)
                return
            if len(done) == 1:
                raise
            for o in done:  # one item the server refuses must not hold back the others
                self._send_completions([o], 1 if o.holds_slot else 0, o.key)
            return
        for t in claimed:
            self._dispatch(t)
        for o, r in zip(done, results, strict=True):
            if r.status == 200:
                log.info("%s completed in %s", o.flight.label, o.flight.took())
            else:
                log.warning(
                    "%s finished in %s, but the result was refused (epoch %s: %s %s)",
                    o.flight.label,
                    o.flight.took(),
                    o.flight.task.epoch,
                    r.status,
                    r.error_message,
                )
            self._reported(o)

    def _send_failure(self, o: _Outcome) -> None:
        t = o.flight.task
        try:
            self.client.fail_task(
                t.id,
                t.epoch,
                o.error or "",
                retryable=o.retryable,
                exc_type=o.exc_type,
                stack=o.stack,
                worker=self.identity,
            )
        except (StateConflict, NotFound):
            log.warning(
                "%s failed in %s, but the failure was refused (epoch %s is stale)",
                o.flight.label,
                o.flight.took(),
                t.epoch,
            )
        else:
            kind = "retryable" if o.retryable else "not retryable"
            log.info("%s failed in %s (%s): %s", o.flight.label, o.flight.took(), kind, o.error)
        self._reported(o)

    def _reported(self, o: _Outcome) -> None:
        with self._cond:
            self._unreported -= 1
            if o.holds_slot:  # its request is over: a slot it did not refill goes back to the claimer
                o.holds_slot = False
                self._refills -= 1
            self._flights.pop((o.flight.task.id, o.flight.task.epoch), None)
            self._cond.notify_all()

    # -- the heartbeater -----------------------------------------------------------------------
    def _heartbeater(self) -> None:
        while not self._helpers_stop.is_set():
            now = time.monotonic()
            with self._cond:
                live = [f for f in self._flights.values() if not (f.lost or f.released)]
                due = [f for f in live if f.next_beat <= now]
                if not due:
                    wake = min((f.next_beat for f in live), default=now + 1.0)
                    self._cond.wait(max(0.01, min(wake - now, 1.0)))
                    continue
            for f in due:
                self._beat(f)

    def _beat(self, f: _Flight) -> None:
        f.next_beat = time.monotonic() + f.interval
        with f.beating:
            if f.released:
                return
            try:
                self.client.heartbeat_task(f.task.id, f.task.epoch)
            except (StateConflict, NotFound):
                self._lease_lost(f)
            except Exception as exc:  # keep beating: the lease has two more intervals
                log.warning("%s: heartbeat failed: %s", f.label, exc)

    def _lease_lost(self, f: _Flight) -> None:
        if (f.task.id, f.task.epoch) not in self._flights:
            return  # reported meanwhile
        f.lost = True
        log.warning("%s: lease lost (epoch %s)", f.label, f.task.epoch)
        if f.future is not None:
            f.future.cancel()

    # -- start and shutdown ------------------------------------------------------------------
    def _begin(self, loop: asyncio.AbstractEventLoop | None) -> None:
        if not self.functions:
            raise ValueError("no task functions: register one with @worker.task(queue)")
        _ensure_log_output()
        self._stop.clear()
        self._stop_at = None
        self._fatal = None
        self._helpers_stop.clear()
        self._outcomes = queue.Queue()
        self._slot_queue = queue.Queue()
        self._flights.clear()
        self._busy = self._unreported = self._claiming = self._refills = 0
        self._refill_ok = True
        self._run_s = self._request_s = None
        self._async_slots = asyncio.Semaphore(self.concurrency)
        threads = [threading.Thread(target=self._heartbeater, name="ledgerflow-task-heartbeat", daemon=True)]
        threads += [
            threading.Thread(target=self._reporter, name=f"ledgerflow-task-reporter-{i}", daemon=True)
            for i in range(self._reporters())
        ]
        if any(not is_async(fn) for fn in self.functions.values()):
            threads += [
                threading.Thread(target=self._slot, name=f"ledgerflow-task-slot-{i}", daemon=True)
                for i in range(self.concurrency)
            ]
        self._loop, self._own_loop = loop, False
        if loop is None and any(is_async(fn) for fn in self.functions.values()):
            self._loop, self._own_loop = asyncio.new_event_loop(), True
            threads.append(
                threading.Thread(target=self._loop.run_forever, name="ledgerflow-task-loop", daemon=True)
            )
        self._threads = threads
        for t in threads:
            t.start()

    def _end(self) -> None:
        """After the claimer stopped: wait out the grace, hand back what still runs, flush results."""
        grace_end = (self._stop_at or time.monotonic()) + self.shutdown_grace_seconds
        with self._cond:  # tasks claimed ahead go back to their queue at once
            waiting = [f for f in self._flights.values() if f.began is None]
            for f in waiting:
                self._drop(f)
        for f in waiting:
            if not (f.lost or f.released):
                self._release(f)
        with self._cond:
            if self._busy:
                log.info(
                    "stopping: waiting up to %.0f s for %d running tasks",
                    max(0.0, grace_end - time.monotonic()),
                    self._busy,
                )
            self._cond.wait_for(lambda: self._busy == 0, timeout=max(0.0, grace_end - time.monotonic()))
            running = [f for f in self._flights.values() if f.ended is None and not f.lost]
        for f in running:
            self._release(f)
        with self._cond:  # the results of finished tasks still go out (bounded: the server may be away)
            self._cond.wait_for(lambda: self._unreported == 0, timeout=FLUSH_SECONDS)
        self._helpers_stop.set()
        for _ in range(self._reporters()):
            self._outcomes.put(None)
        for _ in range(self.concurrency):
            self._slot_queue.put(None)
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:  # a slot still running a handed-back function is left behind (a daemon)
            if not t.name.startswith(("ledgerflow-task-slot", "ledgerflow-task-loop")):
                t.join(2)
        if self._own_loop and self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            for t in self._threads:
                if t.name == "ledgerflow-task-loop":
                    t.join(5)
            if not self._loop.is_running():
                self._loop.close()
        self._threads = []

    def _release(self, f: _Flight) -> None:
        """Hand a claimed task back to its queue at once (no attempt counted): a worker shutting down."""
        f.released = True
        if f.future is not None:
            f.future.cancel()
        try:
            with f.beating:  # after a heartbeat in progress, never before it
                self.client.release_task(f.task.id, f.task.epoch)
            log.info("%s handed back to its queue (the worker is stopping)", f.label)
        except (StateConflict, NotFound):
            pass  # its lease had ended anyway
        except (ApiError, ServerUnreachable) as exc:
            log.warning("%s: not handed back (%s); its lease will expire", f.label, exc)
