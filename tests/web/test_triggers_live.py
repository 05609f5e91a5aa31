"""TRIGGER steps and external dispatch live: real ``ledgerflow worker`` processes (advance + outbound),
a live API and a local receiver on 127.0.0.1. A TRIGGER completes with the receiver's answer as its
output; an external system receives a dispatched task and completes it through the task API; with
the outbound worker killed (-9) mid-call, the receiver sees every idempotency key at most once (a
call in flight when the worker died is never re-sent: its instance goes to NEEDS_REVIEW)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from actors.maintenance import run_drain
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ENGINE_WORKER_ENV, ops, sql, until  # noqa: F401

WORKER_ENV = {
    **ENGINE_WORKER_ENV,
    "LEDGERFLOW_LEASE_SECONDS": "3",
    "LEDGERFLOW_RENEW_SECONDS": "1",
    "LEDGERFLOW_OUTBOUND_ALLOW": "127.0.0.1/32",
}


class Receiver:
    def __init__(self) -> None:
        self.keys: list[str] = []
        self.delay = 0.0
        self.on_dispatch = None
        self.lock = threading.Lock()


@pytest.fixture
def receiver() -> Iterator[tuple[str, Receiver]]:
    rec = Receiver()

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with rec.lock:
                rec.keys.append(self.headers["X-Idempotency-Key"])
            if self.path == "/dispatch" and rec.on_dispatch:
                threading.Thread(target=rec.on_dispatch, args=(json.loads(body),), daemon=True).start()
            time.sleep(rec.delay)
            raw = json.dumps({"received": self.headers["X-Idempotency-Key"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *a) -> None:
            pass

    for port in range(5530, 5550):
        try:
            srv = ThreadingHTTPServer(("127.0.0.1", port), H)
            break
        except OSError:
            continue
    else:  # pragma: no cover
        pytest.skip("no free port in 5530-5549")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{port}", rec
    srv.shutdown()


def _states(ids: list[str]) -> dict[str, str]:
    return {
        r.id: r.state for r in sql("SELECT id, state FROM workflow_instances WHERE id = ANY(:ids)", ids=ids)
    }


def test_trigger_and_dispatch_live_with_a_worker_killed_mid_call(
    ops,  # noqa: F811
    spawn_worker,
    receiver,
    monkeypatch,
) -> None:
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")  # the API checks URLs at publish
    url, rec = receiver
    c = ops.client
    spawn_worker("advance", env=WORKER_ENV)
    out1 = spawn_worker("outbound", env=WORKER_ENV)
    # 1. one TRIGGER: the answer is the step output (and, mapped, the workflow output)
    trig = ops.define(
        {
            "steps": [{"key": "call", "kind": "TRIGGER", "url": url + "/hook", "body": {"n": "$.input.n"}}],
            "output": {"answer": "$.steps.call.output"},
        }
    )
    first = ops.start(trig, {"n": 1})
    until(lambda: c.get_workflow(first).state == "SUCCEEDED", timeout=60)
    assert c.get_workflow(first).output == {"answer": {"status": 200, "body": {"received": rec.keys[0]}}}
    # 2. external dispatch: the external system claims and completes the task through the API
    approval = ops.define(
        {
            "steps": [
                {"key": "approve", "kind": "TASK", "queue": "ext-q", "dispatch": {"url": url + "/dispatch"}}
            ],
            "output": {"decision": "$.steps.approve.output"},
        }
    )

    def external_system(sent: dict) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for task in ops.worker.claim_tasks(sent["callback"]["claim"]["body"]["queues"], max_tasks=4):
                ops.worker.complete_task(
                    task.id, task.epoch, {"approved_by": "erp", "task": sent["task"]["id"]}
                )
                return
            time.sleep(0.2)

    rec.on_dispatch = external_system
    appr = ops.start(approval, {})
    until(lambda: c.get_workflow(appr).state == "SUCCEEDED", timeout=60)
    assert c.get_workflow(appr).output["decision"]["approved_by"] == "erp"
    # 3. slow receiver, six triggers, the outbound worker killed -9 while calls are in flight
    rec.delay = 2.0
    before = len(rec.keys)
    ids = [ops.start(trig, {"n": i}) for i in range(6)]
    until(lambda: len(rec.keys) >= before + 2, timeout=60)
    out1.kill9()
    spawn_worker("outbound", env=WORKER_ENV)

    def settled() -> bool:
        run_drain()  # reclaims the dead worker's jobs once their 3 s lease passed
        return all(s in ("SUCCEEDED", "NEEDS_REVIEW") for s in _states(ids).values())

    until(settled, timeout=120)
    counts = Counter(rec.keys)
    assert max(counts.values()) == 1, counts  # no call was ever sent twice
    states = _states(ids)
    assert "SUCCEEDED" in states.values()
    reviewed = [i for i, s in states.items() if s == "NEEDS_REVIEW"]
    dead = sql(
        "SELECT instance_id FROM workflow_jobs WHERE type = 'trigger_dispatch' AND status = 'dead' "
        "AND error_code = 'EXTERNAL_OUTCOME_UNKNOWN' AND instance_id = ANY(:ids)",
        ids=ids,
    )
    assert sorted(r.instance_id for r in dead) == sorted(reviewed)
    assert reviewed, "the calls in flight when the worker died must be in review (never re-sent)"
    print(
        f"killed mid-call: {len(reviewed)} in review, {len(ids) - len(reviewed)} succeeded; keys {len(counts)}"
    )
