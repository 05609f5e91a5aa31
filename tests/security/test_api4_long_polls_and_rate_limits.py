"""OWASP API4:2023 Unrestricted Resource Consumption, the serving side: long-poll claims hold no
request thread (the Procfile's gevent worker) and wake on a database NOTIFY; one credential may keep
only so many waiting at once; every credential has rate limits answered with 429 + Retry-After."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import httpx
import pytest

from ledgerflow.client import Client
from tests.security import hostile
from tests.web.wf_live import waiting_long_polls
from tests.web.wf_ops import until

TASK_DOC = {"steps": [{"key": "t", "kind": "TASK", "queue": "q"}]}


def _claim(ns, who: str, wait: int, queue: str = "q", url: str | None = None) -> httpx.Response:
    return httpx.post(
        (url or ns.url) + "/v1/tasks/claim",
        json={"queues": [queue], "wait_seconds": wait, "max_tasks": 1},
        headers={"Authorization": f"Bearer {ns.tokens[who]}", "Idempotency-Key": uuid.uuid4().hex},
        timeout=60,
    )


def test_a_waiting_claim_wakes_on_notify_not_on_polling(ops, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_CLAIM_POLL_SECONDS", "30")  # no timed look within the test
    def_id = ops.define(TASK_DOC)
    out: dict = {}

    def claim() -> None:
        started = time.monotonic()
        out["r"] = _claim(ops.ns, "worker", 20)
        out["took"] = time.monotonic() - started

    t = threading.Thread(target=claim)
    t.start()
    time.sleep(0.5)
    ops.start(def_id)
    t.join(timeout=25)
    assert out["r"].status_code == 200 and len(out["r"].json()["data"]["tasks"]) == 1
    assert out["took"] < 10  # woken by the NOTIFY at commit, not by the 20 s deadline


def test_concurrent_long_polls_per_credential_are_capped(wf_ns, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_LONG_POLLS_PER_CREDENTIAL", "2")
    with ThreadPoolExecutor(2) as pool:
        waiting = [pool.submit(_claim, wf_ns, "worker", 3, f"empty-{i}") for i in range(2)]
        time.sleep(0.7)
        r = _claim(wf_ns, "worker", 3, "empty-3")
        assert r.status_code == 429 and r.json()["code"] == "RATE_LIMITED"
        assert int(r.headers["Retry-After"]) >= 1
        assert _claim(wf_ns, "worker", 0).status_code == 200  # a claim that does not wait is not capped
        assert [f.result().status_code for f in waiting] == [200, 200]
    assert _claim(wf_ns, "worker", 1).status_code == 200  # the slots were given back


def test_per_credential_rate_limit_answers_429_with_retry_after(wf_ns, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_RATE_LIMIT", "5/minute")
    headers = {"Authorization": f"Bearer {wf_ns.tokens['start_only']}"}
    codes = [httpx.get(wf_ns.url + "/v1/workflows", headers=headers).status_code for _ in range(6)]
    assert codes == [200] * 5 + [429]
    r = httpx.get(wf_ns.url + "/v1/workflows", headers=headers)
    assert r.json()["code"] == "RATE_LIMITED" and 1 <= int(r.headers["Retry-After"]) <= 60
    other = {"Authorization": f"Bearer {wf_ns.tokens['all']}"}  # another credential is not affected
    assert httpx.get(wf_ns.url + "/v1/workflows", headers=other).status_code == 200


def test_the_sdk_waits_out_a_rate_limit_with_the_same_key(wf_ns, monkeypatch):
    """A client faster than its credential's limit (the fault suite's burst of idempotent starts hit
    100/second once starts got faster) is slowed down by the SDK, not failed."""
    monkeypatch.setenv("LEDGERFLOW_RATE_LIMIT", "3/second")
    client = Client(wf_ns.url, wf_ns.tokens["start_only"], retries=4)
    started = time.monotonic()
    pages = [client.list_workflows(limit=1) for _ in range(5)]
    assert len(pages) == 5 and time.monotonic() - started >= 0.5  # at least one Retry-After waited out


@pytest.fixture
def procfile_web(tmp_path):
    """The Procfile's ``web`` command (``hostile.procfile_web``); ``stop()`` sends it SIGTERM mid-test."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(hostile.procfile_web(tmp_path, LEDGERFLOW_LONG_POLLS_PER_CREDENTIAL="64"))
        yield SimpleNamespace(url=url, stop=stack.close)


def test_long_polls_do_not_starve_the_api(ops, procfile_web):
    """16 waiting claims on one ``web`` worker (the old gthread setting had 4 threads) and a read still
    answers while every one of them is waiting. Nothing is timed (this failed on a busy machine):
    the claims are known to wait (the long-poll count in Redis), they wait far longer than any read takes,
    and the read must come back before any of them does; the web process's graceful stop then ends them."""
    if not os.environ.get("REDIS_URL"):
        pytest.skip("the waiting long polls are counted in Redis")
    wid = ops.start(ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]}))
    with ThreadPoolExecutor(16) as pool:
        waiting = [
            pool.submit(_claim, ops.ns, "worker", 30, f"idle-{i}", procfile_web.url) for i in range(16)
        ]
        until(lambda: waiting_long_polls(ops.ns.tokens["worker"]) == 16 or any(f.done() for f in waiting), 60)
        assert not any(f.done() for f in waiting), [f.result().text for f in waiting if f.done()]
        r = httpx.get(
            f"{procfile_web.url}/v1/workflows/{wid}",
            headers={"Authorization": f"Bearer {ops.ns.tokens['all']}"},
            timeout=60,
        )
        assert r.status_code == 200 and r.json()["data"]["id"] == wid
        assert not any(f.done() for f in waiting)  # the read did not wait for a claim to give up its turn
        procfile_web.stop()  # SIGTERM: the waiting claims answer "nothing yet" at once
        assert [f.result().json()["data"]["tasks"] for f in waiting] == [[]] * 16
