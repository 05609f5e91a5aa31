"""TaskWorker(concurrency=N) against a live server (X-TASK): tasks really run at once (the tasks prove
it with barriers, not timing), async functions share one event loop, failures, heartbeats of long
tasks from one thread, lease loss, clean shutdown, and the batch completion endpoint."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ledgerflow.client import Client, InvalidArgument, NonRetryableError, StateConflict, Task, TaskWorker
from tests.web.wf_ops import until

DEADLINE = 60.0  # generous: the machine is shared


def _one_task_definition(c: Client, queue: str, *, retry: dict | None = None) -> str:
    d = c.create_definition("w-" + uuid.uuid4().hex[:8])
    step: dict[str, Any] = {"key": "t", "kind": "TASK", "queue": queue, "input": "$.input"}
    if retry:
        step["retry"] = retry
    c.publish_version(
        d["id"],
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 600,
            "steps": [step],
            "output": {"r": "$.steps.t.output"},
        },
    )
    return d["id"]


def _start(c: Client, def_id: str, n: int) -> list[str]:
    return [c.start_workflow(def_id, "v1", {"i": i}).instance.id for i in range(n)]


class Recording(Client):
    """A real client that records what the worker asks of the server, and from which thread."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.claims: list[int] = []
        self.batches: list[int] = []
        self.refilled = 0  # tasks claimed by completion requests
        self.beats: list[tuple[str, int, str]] = []  # (task id, thread id, thread name)
        self.beat_event = threading.Condition()

    def claim_tasks(self, queues, *, wait_seconds=0, max_tasks=1, worker=None):
        self.claims.append(max_tasks)
        return super().claim_tasks(queues, wait_seconds=wait_seconds, max_tasks=max_tasks, worker=worker)

    def complete_and_claim(self, completions, queues=(), *, max_tasks=0, idempotency_key=None, worker=None):
        completions = list(completions)
        self.batches.append(len(completions))
        results, claimed = super().complete_and_claim(
            completions, queues, max_tasks=max_tasks, idempotency_key=idempotency_key, worker=worker
        )
        self.refilled += len(claimed)
        return results, claimed

    def heartbeat_task(self, task_id, epoch):
        t = super().heartbeat_task(task_id, epoch)
        with self.beat_event:
            self.beats.append((task_id, threading.get_ident(), threading.current_thread().name))
            self.beat_event.notify_all()
        return t

    def beats_of(self, task_id: str) -> int:
        return sum(1 for t, _, _ in self.beats if t == task_id)


def _client(ns, cls: type[Client] = Client) -> Client:
    return cls(ns.url, ns.tokens["all"])


def test_concurrency_runs_n_tasks_at_once_and_claims_and_completes_in_batches(wf_ns):
    c = _client(wf_ns)
    n = 6
    def_id = _one_task_definition(c, "par")
    wids = _start(c, def_id, n)
    barrier = threading.Barrier(n, timeout=DEADLINE)  # passes only when all n run at the same time
    rec = Recording(wf_ns.url, wf_ns.tokens["worker"])
    worker = TaskWorker(rec, wait_seconds=1, concurrency=n)

    @worker.task("par")
    def work(task: Task) -> dict:
        barrier.wait()
        return {"i": task.input["i"], "thread": threading.current_thread().name}

    with worker.in_background():
        done = [c.wait_for_workflow(w, timeout=DEADLINE) for w in wids]
    assert [d.state for d in done] == ["SUCCEEDED"] * n
    assert sorted(d.output["r"]["i"] for d in done) == list(range(n))
    assert len({d.output["r"]["thread"] for d in done}) == n  # n slots, one task each
    assert rec.claims[0] == n  # one claim asks for every free slot
    assert max(rec.claims) <= 2 * n  # later ones also for tasks claimed ahead: at most n more
    assert sum(rec.batches) == n and all(b <= 16 for b in rec.batches)


def test_async_functions_run_at_once_on_one_event_loop_beside_plain_ones(wf_ns):
    c = _client(wf_ns)
    n = 4
    async_def, plain_def = _one_task_definition(c, "aio"), _one_task_definition(c, "plain")
    wids = _start(c, async_def, n) + _start(c, plain_def, 2)
    threads: set[int] = set()
    worker = TaskWorker(Client(wf_ns.url, wf_ns.tokens["worker"]), wait_seconds=1, concurrency=n + 2)
    state: dict[str, Any] = {}

    @worker.task("aio")
    async def fetch(task: Task) -> dict:
        if "barrier" not in state:
            state["barrier"] = asyncio.Barrier(n)
        threads.add(threading.get_ident())
        await asyncio.wait_for(state["barrier"].wait(), DEADLINE)  # all n coroutines are running
        return {"async": task.input["i"]}

    @worker.task("plain")
    def plain(task: Task) -> dict:
        return {"plain": task.input["i"]}

    with worker.in_background():
        done = [c.wait_for_workflow(w, timeout=DEADLINE) for w in wids]
    assert [d.state for d in done] == ["SUCCEEDED"] * (n + 2)
    assert sorted(d.output["r"]["async"] for d in done[:n]) == list(range(n))
    assert sorted(d.output["r"]["plain"] for d in done[n:]) == [0, 1]
    assert len(threads) == 1  # one event loop thread ran every coroutine


def test_run_async_runs_async_functions_on_the_callers_loop(wf_ns):
    c = _client(wf_ns)
    def_id = _one_task_definition(c, "aio2")
    wids = _start(c, def_id, 3)
    worker = TaskWorker(Client(wf_ns.url, wf_ns.tokens["worker"]), wait_seconds=1, concurrency=3)
    loops: set[int] = set()

    @worker.task("aio2")
    async def work(task: Task) -> int:
        loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0)
        return task.input["i"]

    async def main() -> list[str]:
        serving = asyncio.create_task(worker.run_async())
        states = []
        for w in wids:
            states.append((await asyncio.to_thread(c.wait_for_workflow, w, timeout=DEADLINE)).state)
        loops.add(-id(asyncio.get_running_loop()))
        serving.cancel()  # a cancelled run_async stops the worker cleanly
        with pytest.raises(asyncio.CancelledError):
            await serving
        return states

    # a loop of its own in a thread of its own: the browser suite's session-wide Playwright keeps an event
    # loop running in this thread, where asyncio.run refuses to start
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(asyncio.run, main()).result() == ["SUCCEEDED"] * 3
    assert len(loops) == 2 and sum(loops) == 0  # the functions ran on main()'s own loop


def test_failing_tasks_retryable_then_not(wf_ns, caplog):
    c = _client(wf_ns)
    retry_def = _one_task_definition(c, "flaky", retry={"max_attempts": 2, "backoff_seconds": 0})
    fatal_def = _one_task_definition(c, "broken")
    [flaky_wid], [broken_wid] = _start(c, retry_def, 1), _start(c, fatal_def, 1)
    worker = TaskWorker(Client(wf_ns.url, wf_ns.tokens["worker"]), wait_seconds=1, concurrency=4)

    @worker.task("flaky")
    def flaky(task: Task) -> dict:
        if task.attempt == 1:
            raise ConnectionError("busy")
        return {"attempt": task.attempt}

    @worker.task("broken")
    async def broken(task: Task) -> None:
        raise NonRetryableError("bad input")

    with caplog.at_level(logging.INFO, logger="ledgerflow.worker"), worker.in_background():
        ok = c.wait_for_workflow(flaky_wid, timeout=DEADLINE)
        bad = c.wait_for_workflow(broken_wid, timeout=DEADLINE)
    assert ok.state == "SUCCEEDED" and ok.output == {"r": {"attempt": 2}}
    assert bad.state == "FAILED"
    err = c.get_workflow_step(broken_wid, "t").error
    assert "NonRetryableError: bad input" in str(err)
    text = caplog.text
    assert "(retryable): ConnectionError: busy" in text and "(not retryable): NonRetryableError" in text
    assert "attempt 2) completed in" in text


def test_long_tasks_are_heartbeaten_from_one_thread(wf_ns, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_TASK_LEASE_SECONDS", "3")  # read by the in-process server per claim
    c = _client(wf_ns)
    n = 3
    def_id = _one_task_definition(c, "long")
    wids = _start(c, def_id, n)
    rec = Recording(wf_ns.url, wf_ns.tokens["worker"])
    worker = TaskWorker(rec, wait_seconds=1, concurrency=n)  # heartbeats every lease / 3 = 1 s

    @worker.task("long")
    def long(task: Task) -> int:
        # outlive the lease (3 s): run until this task's lease was renewed 4 times
        with rec.beat_event:
            assert rec.beat_event.wait_for(lambda: rec.beats_of(task.id) >= 4, DEADLINE)
        return task.input["i"]

    with worker.in_background():
        done = [c.wait_for_workflow(w, timeout=DEADLINE) for w in wids]
    assert [d.state for d in done] == ["SUCCEEDED"] * n  # no result was refused: the leases held
    assert len({t for t, _, _ in rec.beats}) == n
    assert len({thread for _, thread, _ in rec.beats}) == 1  # every heartbeat came from one thread
    assert {name for _, _, name in rec.beats} == {"ledgerflow-task-heartbeat"}


def _steal(c: Client, task_id: str, epoch: int, queue: str) -> Task:
    """End the worker's claim (as a lapsed lease would) and claim the task again: epoch + 1. A
    heartbeat that began before the release committed may renew the lease once: release again."""

    def once() -> list[Task]:
        try:
            c.release_task(task_id, epoch)
        except StateConflict:  # already ended
            pass
        return c.claim_tasks([queue], wait_seconds=0)

    got = until(once, DEADLINE)
    assert got[0].id == task_id and got[0].epoch == epoch + 1
    return got[0]


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_lease_loss_drops_the_result_and_cancels_an_async_function(wf_ns, caplog, kind):
    c = _client(wf_ns)
    queue = f"lose-{kind}"
    def_id = _one_task_definition(c, queue)
    [wid] = _start(c, def_id, 1)
    rec = Recording(wf_ns.url, wf_ns.tokens["worker"])
    worker = TaskWorker(rec, wait_seconds=1, heartbeat_seconds=0.2)
    started, release_plain = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}
    if kind == "plain":

        @worker.task(queue)
        def work(task: Task) -> dict:
            seen["task"] = task
            started.set()
            release_plain.wait(DEADLINE)
            return {"by": "worker"}
    else:

        @worker.task(queue)
        async def work(task: Task) -> dict:
            seen["task"] = task
            started.set()
            try:
                await asyncio.sleep(DEADLINE)
            except asyncio.CancelledError:
                seen["cancelled"] = True
                raise
            return {"by": "worker"}

    with caplog.at_level(logging.INFO, logger="ledgerflow.worker"), worker.in_background():
        assert started.wait(DEADLINE)
        mine = seen["task"]
        other = _steal(c, mine.id, mine.epoch, queue)
        until(lambda: "lease lost" in caplog.text, DEADLINE)
        c.complete_task(other.id, other.epoch, {"by": "other"})
        release_plain.set()
        if kind == "async":
            until(lambda: seen.get("cancelled"), DEADLINE)
        until(lambda: "its result is not sent" in caplog.text, DEADLINE)
    assert c.wait_for_workflow(wid, timeout=DEADLINE).output == {"r": {"by": "other"}}
    assert rec.batches == []  # the worker never sent the result of the claim it lost


def test_stop_finishes_what_fits_in_the_grace_and_hands_back_the_rest(wf_ns, caplog):
    c = _client(wf_ns)
    def_id = _one_task_definition(c, "stop")
    wids = _start(c, def_id, 2)
    worker = TaskWorker(
        Client(wf_ns.url, wf_ns.tokens["worker"]), wait_seconds=1, concurrency=2, shutdown_grace_seconds=1.0
    )
    running = threading.Barrier(3, timeout=DEADLINE)
    quick_may_end, slow_may_end = threading.Event(), threading.Event()
    ids: dict[int, Task] = {}

    @worker.task("stop")
    def work(task: Task) -> str:
        ids[task.input["i"]] = task
        running.wait()
        (quick_may_end if task.input["i"] == 0 else slow_may_end).wait(DEADLINE)
        return "done"

    serving = threading.Thread(target=worker.run)
    with caplog.at_level(logging.INFO, logger="ledgerflow.worker"):
        serving.start()
        running.wait()  # both tasks run
        worker.stop()
        quick_may_end.set()  # one ends inside the grace; the other outlives it
        serving.join(DEADLINE)
        assert not serving.is_alive()
    assert c.wait_for_workflow(wids[0], timeout=DEADLINE).state == "SUCCEEDED"
    slow = ids[1]
    back = c.get_task(slow.id)
    assert back.state == "PENDING" and back.epoch == slow.epoch  # handed back, due again now
    assert "handed back to its queue" in caplog.text
    [again] = c.claim_tasks(["stop"], wait_seconds=1)
    assert again.id == slow.id and again.attempt == slow.attempt  # no attempt was counted
    slow_may_end.set()
    c.complete_task(again.id, again.epoch, "by another worker")
    assert c.wait_for_workflow(wids[1], timeout=DEADLINE).output == {"r": "by another worker"}


def test_batch_completion_answers_each_item_and_is_idempotent_per_task(wf_ns):
    c = _client(wf_ns)
    def_id = _one_task_definition(c, "batch")
    wids = _start(c, def_id, 3)
    w = Client(wf_ns.url, wf_ns.tokens["worker"])
    got = w.claim_tasks(["batch"], max_tasks=3)
    assert len(got) == 3
    a, b, stale = got
    c.release_task(stale.id, stale.epoch)
    [stale2] = w.claim_tasks(["batch"], max_tasks=1)
    missing = uuid.uuid4().hex
    items = [
        (a.id, a.epoch, {"n": 9007199254740993}),
        (b.id, b.epoch, [1.5, None, True]),
        (stale.id, stale.epoch, "late"),
        (missing, 1, None),
    ]
    first = w.complete_tasks(items, idempotency_key="k1")
    assert [r.status for r in first] == [200, 200, 409, 404]
    assert first[0].task.state == "COMPLETED" and first[0].task.output == {"n": 9007199254740993}
    assert first[2].error_code == "STATE_CONFLICT" and first[3].error_code == "NOT_FOUND"
    assert not first[0].replayed
    again = w.complete_tasks(items[:2], idempotency_key="k2")  # the same completions once more
    assert [(r.status, r.replayed) for r in again] == [(200, True), (200, True)]
    other = w.complete_tasks([(a.id, a.epoch, {"n": 1})])  # another output for a completed task
    assert other[0].status == 409
    with pytest.raises(StateConflict):
        w.complete_task(stale.id, stale.epoch, "late")
    assert w.complete_tasks([(stale2.id, stale2.epoch, "ok")])[0].status == 200
    assert [c.get_workflow(x).state for x in wids] == ["SUCCEEDED"] * 3

    with pytest.raises(InvalidArgument) as e:
        w.complete_tasks([(a.id, a.epoch, 1), (a.id, a.epoch, 1)])
    assert "each task at most once" in str(e.value)


def _chain_definition(c: Client, queue: str, steps: int) -> str:
    d = c.create_definition("chain-" + uuid.uuid4().hex[:8])
    chain: list[dict[str, Any]] = [
        {"key": f"s{i}", "kind": "TASK", "queue": queue, **({"after": [f"s{i - 1}"]} if i else {})}
        for i in range(steps)
    ]
    c.publish_version(d["id"], {"version": "v1", "input_schema": {}, "deadline_seconds": 600, "steps": chain})
    return d["id"]


def test_a_completion_claims_the_next_step_for_the_slot_it_freed(wf_ns):
    """One slot, one workflow of three TASK steps: the first claim gets step 0; each completion request
    claims the step its completion created (the slot it freed waits for it, so the claimer never races
    it); the last completion finds nothing and gives the slot back to the claimer."""
    c = _client(wf_ns)
    [wid] = _start(c, _chain_definition(c, "chain", 3), 1)
    rec = Recording(wf_ns.url, wf_ns.tokens["worker"])
    worker = TaskWorker(rec, wait_seconds=1, concurrency=1)
    ran: list[str] = []

    @worker.task("chain")
    def work(task: Task) -> str:
        ran.append(task.step_key)
        return task.step_key

    with worker.in_background():
        assert c.wait_for_workflow(wid, timeout=DEADLINE).state == "SUCCEEDED"
    assert ran == ["s0", "s1", "s2"]
    assert rec.batches == [1, 1, 1]
    assert rec.refilled == 2  # s1 and s2 came with the completions of s0 and s1


class OldServer(Recording):
    """A server of an earlier release: ``claim`` in a completion request is an unknown field (400)."""

    def complete_and_claim(self, completions, queues=(), *, max_tasks=0, idempotency_key=None, worker=None):
        if max_tasks:
            self.refused = getattr(self, "refused", 0) + 1
            raise InvalidArgument(
                400, "INVALID_ARGUMENT", "invalid", errors=[{"field": "claim", "message": "unknown field"}]
            )
        return super().complete_and_claim(completions, queues, idempotency_key=idempotency_key)


def test_a_server_without_claim_on_completions_gets_plain_completions(wf_ns, caplog):
    c = _client(wf_ns)
    [wid] = _start(c, _chain_definition(c, "old", 3), 1)
    rec = OldServer(wf_ns.url, wf_ns.tokens["worker"])
    worker = TaskWorker(rec, wait_seconds=1, concurrency=2)

    @worker.task("old")
    def work(task: Task) -> str:
        return task.step_key

    with caplog.at_level(logging.INFO, logger="ledgerflow.worker"), worker.in_background():
        assert c.wait_for_workflow(wid, timeout=DEADLINE).state == "SUCCEEDED"
    assert rec.refused == 1  # asked once, then never again
    assert rec.refilled == 0 and sum(rec.batches) == 3 and len(rec.claims) >= 3
    assert "takes no claim with completions" in caplog.text
