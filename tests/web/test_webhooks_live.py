"""Signed webhooks end to end (X-EVENT): the live API, a real `ledgerflow worker --pool
outbound` process and a real local receiver. A receiver answering 500 twice then 200 gets the event
acknowledged once; every delivery verifies with the SDK's verifier; after a rotation deliveries carry
both signatures; a SIGKILLed outbound worker causes no duplicate and no lost delivery."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from app.db import get_engine
from app.ledger.drain import drain
from app.settings import get_settings
from ledgerflow.client import InvalidArgument, verify_webhook
from tests.web.webhook_receiver import Receiver, start_receiver
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ops, sql, until  # noqa: F401

ALLOW = {"LEDGERFLOW_OUTBOUND_ALLOW": "127.0.0.1/32"}
FAST = {
    **ALLOW,
    "LEDGERFLOW_HANDLERS": "",
    "LEDGERFLOW_POLL_SECONDS": "0.2",
    "LEDGERFLOW_BACKOFF_BASE_SECONDS": "0.2",
    "LEDGERFLOW_BACKOFF_CAP_SECONDS": "1",
}
TASK = {"steps": [{"key": "work", "kind": "TASK", "queue": "wh-q"}]}


@pytest.fixture
def receiver(monkeypatch) -> Iterator[Receiver]:
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")  # the API checks URLs at create time
    r = start_receiver()
    yield r
    r.close()


def _started_event(c, wid: str) -> dict:
    return next(e for e in c.list_workflow_events(wid) if e["type"] == "workflow.started")


def test_retries_signatures_rotation_and_one_acknowledgement(ops, receiver, spawn_worker) -> None:  # noqa: F811
    c = ops.client
    # the destination policy is checked at create time too: loopback without the allow-list is a 400
    with pytest.raises(InvalidArgument) as refused:
        c.create_subscription("http://169.254.169.254/latest", ["*"])
    assert refused.value.errors[0]["field"] == "url"
    flaky = c.create_subscription(receiver.url("/flaky"), ["workflow.started"])
    every = c.create_subscription(receiver.url("/ok"), ["workflow.*", "task.created"])
    assert flaky["secret"].startswith("whsec_") and "secret" not in c.get_subscription(flaky["id"])
    spawn_worker("outbound", env=FAST)
    wid = ops.start(ops.define(TASK))
    started = _started_event(c, wid)
    assert started["seq"] == 1 and started["body"]["instance"]["id"] == wid
    until(lambda: receiver.acked[started["id"]] >= 2, timeout=30)  # /flaky and /ok
    flaky_ids = receiver.ids("/flaky")
    assert flaky_ids == {started["id"]: 3}  # 500, 500, 200: acknowledged once
    # the receiver counts its answer before sending it: the worker records the delivery a moment later
    until(lambda: c.list_deliveries(flaky["id"])["items"][0]["status"] == "succeeded", timeout=10)
    [log] = c.list_deliveries(flaky["id"])["items"]
    assert (log["status"], log["attempts"], log["response_code"]) == ("succeeded", 3, 200)
    assert log["latency_ms"] is not None and log["event_id"] == started["id"]
    every_types = {e["type"] for e in c.list_workflow_events(wid)} & {"workflow.started", "task.created"}
    until(lambda: len(receiver.received("/ok")) >= len(every_types))
    for r in receiver.received():
        secret = flaky["secret"] if r.path == "/flaky" else every["secret"]
        event = verify_webhook(secret, r.body, r.headers)
        assert event["id"] == r.headers["webhook-id"] and event["workflow_id"] == wid
        assert r.headers["X-Idempotency-Key"].startswith(event["id"])
    # rotation: the new secret is shown once; meanwhile deliveries carry both signatures
    rotated = c.rotate_subscription_secret(every["id"], grace_seconds=3600)
    assert rotated["secret"] != every["secret"] and rotated["previous_secret_expires_at"]
    before = len(receiver.received("/ok"))
    c.control_workflow(wid, "CANCEL", 1, "rotation check")
    until(lambda: any(r.headers["webhook-id"] for r in receiver.received("/ok")[before:]))
    fresh = receiver.received("/ok")[before]
    assert len(fresh.headers["webhook-signature"].split(" ")) == 2
    assert verify_webhook(rotated["secret"], fresh.body, fresh.headers)
    assert verify_webhook(every["secret"], fresh.body, fresh.headers)
    # a bad secret does not verify
    with pytest.raises(Exception, match="signature"):
        verify_webhook(flaky["secret"], fresh.body, fresh.headers)


def test_a_sigkilled_outbound_worker_loses_and_duplicates_nothing(ops, receiver, spawn_worker) -> None:  # noqa: F811
    c = ops.client
    sub = c.create_subscription(receiver.url("/slow"), ["workflow.started"])
    def_id = ops.define(TASK)
    env = {**FAST, "LEDGERFLOW_LEASE_SECONDS": "2", "LEDGERFLOW_RENEW_SECONDS": "0.5"}
    worker = spawn_worker("outbound", env=env)
    wids = [ops.start(def_id) for _ in range(8)]
    events = {_started_event(c, w)["id"] for w in wids}
    until(lambda: len(receiver.received("/slow")) >= 2, timeout=30)
    worker.kill9()  # mid-delivery: requests are in flight at the receiver
    in_flight = set(receiver.ids("/slow"))
    settings = replace(get_settings(), lease_seconds=2, backoff_base_seconds=0.1)
    sql("SELECT pg_sleep(2.2)")  # the dead worker's leases expire
    report = drain(get_engine(), settings)
    assert report.to_dead >= 1  # the calls that had left: needs confirmation, never re-sent
    spawn_worker("outbound", env=env)

    def deliveries() -> list[dict]:
        return c.list_deliveries(sub["id"])["items"]

    def settled() -> bool:
        # one read per look: the list grows while the new worker fans the remaining events out, so two
        # reads could see 4 settled rows, then 8 rows (4 still pending), and pass too early
        ds = deliveries()
        return len(ds) == 8 and all(d["status"] in ("succeeded", "unknown") for d in ds)

    until(settled, timeout=60)
    counts = receiver.ids("/slow")
    assert max(counts.values()) == 1, counts  # no duplicate
    unknown = {d["event_id"] for d in deliveries() if d["status"] == "unknown"}
    assert unknown and unknown <= in_flight | events
    assert set(counts) | unknown == events  # nothing lost: delivered, or in the dead letter to confirm
    jobs = sql(
        "SELECT j.status, j.error_code FROM webhook_deliveries d JOIN workflow_jobs j ON j.id = d.job_id "
        "WHERE d.subscription_id = :s AND d.event_id = ANY(:u)",
        s=sub["id"],
        u=list(unknown),
    )
    assert {tuple(j) for j in jobs} == {("dead", "EXTERNAL_OUTCOME_UNKNOWN")}
    # the operator confirms with the receiver and redelivers: the receiver sees the same webhook-id
    for d in deliveries():
        if d["status"] == "unknown":
            c.redeliver(sub["id"], d["id"], "checked with the receiver")
    until(lambda: set(receiver.ids("/slow")) == events, timeout=30)


def test_events_route_is_namespace_scoped(ops, wf_server) -> None:  # noqa: F811
    from tests.web.wf_live import make_namespace

    wid = ops.start(ops.define(TASK))
    other = make_namespace(wf_server).client()
    with pytest.raises(Exception, match="not found"):
        other.list_workflow_events_page(wid)
    page = ops.client.list_workflow_events_page(wid, limit=1)
    assert len(page["items"]) == 1 and page["next_cursor"]
    rest = ops.client.list_workflow_events_page(wid, limit=100, cursor=page["next_cursor"])
    assert [e["seq"] for e in rest["items"]] == list(range(2, len(rest["items"]) + 2))
