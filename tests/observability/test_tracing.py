"""One trace from an API request to the outbound HTTP call of a job's handler, with the in-memory
exporter: POST /v1/workflows (its parent is the caller's traceparent) -> the TIMER step's job stores
the request span as its traceparent -> the attempt span is the request span's child -> the handler's
outbound call is the attempt span's child and carries traceparent to the receiver -> the job the
handler enqueued (the next TIMER) runs as the first attempt's child. The ledger trace id of the
instance and its jobs is the OTel trace id."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from app.auth import create_credential
from app.db import transaction
from app.ledger import handlers
from app.observability import tracing
from tests.observability.conftest import scalar

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def spans() -> Iterator:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    assert tracing.setup("test", exporter=exporter, set_global=False)
    yield exporter
    tracing.shutdown()


@pytest.fixture
def receiver(monkeypatch) -> Iterator[tuple[str, list[dict]]]:
    """A local HTTP receiver (a port of 5200-5299) recording the headers of each request; the
    destination policy opens loopback for it through its allow-list."""
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = None
    for port in range(5200, 5300):
        try:
            server = HTTPServer(("127.0.0.1", port), Handler)
            break
        except OSError:
            continue
    assert server is not None, "no free port in 5200-5299"
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_port}/probe", seen
    server.shutdown()
    server.server_close()


def _hex(n: int, width: int) -> str:
    return f"{n:0{width}x}"


def test_request_job_attempt_and_outbound_call_form_one_trace(
    spans, receiver, fresh, handler_registry, run_pool
):
    from app.engine.handlers import timers
    from tests.engine.helpers import publish
    from web import create_app

    url, seen = receiver

    def delay_wake(ctx):  # the engine's handler, plus an outbound call
        if (ctx.payload or {}).get("wake") == "timer":
            ctx.http.request("GET", url, step_key=f"probe-{ctx.job_id}")
        return timers.delay_wake(ctx)

    handlers.register("delay_wake", delay_wake, replace=True)
    with transaction() as conn:
        issued = create_credential(conn, namespace="traced", name="starter", scopes=["workflows:start"])
    doc = {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 600,
        "steps": [
            {"key": "first", "kind": "TIMER", "after": [], "delay_seconds": 0},
            {"key": "second", "kind": "TIMER", "after": ["first"], "delay_seconds": 0},
        ],
    }
    def_id = publish(fresh, issued.namespace_id, doc)
    app = create_app()  # tracing is on: the app is instrumented
    resp = app.test_client().post(
        "/v1/workflows",
        headers={
            "Authorization": f"Bearer {issued.token}",
            "Idempotency-Key": uuid.uuid4().hex,
            "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
        },
        data=json.dumps({"definition_id": def_id, "version": "v1", "input": {}}),
        content_type="application/json",
    )
    assert resp.status_code == 201, resp.data
    instance_id = resp.json["data"]["instance"]["id"]
    # the ledger trace id of the instance is the caller's trace id
    assert (
        scalar(fresh, "SELECT trace_id FROM workflow_instances WHERE id = :i", i=instance_id) == CLIENT_TRACE
    )
    run_pool(
        "advance",
        lambda: (
            scalar(
                fresh,
                "SELECT count(*) FROM workflow_steps WHERE instance_id = :i AND key = 'second' "
                "AND state = 'SUCCEEDED'",
                i=instance_id,
            )
            == 1
        ),
    )
    finished = spans.get_finished_spans()
    server = [
        s for s in finished if s.kind.name == "SERVER" and s.attributes.get("http.route") == "/v1/workflows"
    ]
    assert len(server) == 1, [s.name for s in finished]
    server = server[0]
    assert _hex(server.context.trace_id, 32) == CLIENT_TRACE
    assert server.parent is not None and _hex(server.parent.span_id, 16) == CLIENT_SPAN

    timer_job = scalar(
        fresh,
        "SELECT traceparent FROM workflow_jobs WHERE instance_id = :i AND step_key = 'first' "
        "AND payload->>'wake' = 'timer'",
        i=instance_id,
    )
    assert timer_job == f"00-{CLIENT_TRACE}-{_hex(server.context.span_id, 16)}-01"
    jobs_trace = scalar(
        fresh, "SELECT array_agg(DISTINCT trace_id) FROM workflow_jobs WHERE instance_id = :i", i=instance_id
    )
    assert jobs_trace == [CLIENT_TRACE]

    attempts = sorted((s for s in finished if s.name == "job delay_wake"), key=lambda s: s.start_time)
    first = [s for s in attempts if s.parent is not None and s.parent.span_id == server.context.span_id]
    assert len(first) == 1, [(s.name, s.parent) for s in attempts]
    first = first[0]
    assert first.kind.name == "CONSUMER" and first.context.trace_id == server.context.trace_id
    assert first.attributes["ledgerflow.instance_id"] == instance_id
    assert first.attributes["ledgerflow.trace_id"] == CLIENT_TRACE

    calls = [
        s
        for s in finished
        if s.kind.name == "CLIENT"
        and not s.name.startswith("db ")  # the SQL statements of the attempt (app.sql), CLIENT spans too
        and s.parent is not None
        and s.parent.span_id == first.context.span_id
    ]
    assert len(calls) == 1, [s.name for s in finished]
    call = calls[0]
    assert call.context.trace_id == server.context.trace_id
    # the receiver got the W3C traceparent of the client span
    sent = [
        h["traceparent"]
        for h in seen
        if h.get("traceparent", "").split("-")[2] == _hex(call.context.span_id, 16)
    ]
    assert sent and sent[0].split("-")[1] == CLIENT_TRACE

    # the second TIMER's job was enqueued by the first attempt: its attempt is that attempt's child
    second = [s for s in attempts if s.parent is not None and s.parent.span_id == first.context.span_id]
    assert len(second) == 1
    assert all(s.context.trace_id == server.context.trace_id for s in attempts)


def test_tracing_off_costs_nothing_and_still_sends_a_traceparent(fresh, handler_registry, run_pool, receiver):
    """Off (the default): no traceparent is stored; an outbound call still carries a (not sampled)
    traceparent naming the ledger trace id, so a receiver can correlate it with the job."""
    from app.ledger.enqueue import enqueue

    assert not tracing.ENABLED and tracing.current_traceparent() is None
    url, seen = receiver
    handlers.register(
        "event_dispatch", lambda ctx: ctx.http.request("GET", url, step_key="p").status_code, replace=True
    )
    trace = uuid.uuid4().hex
    with transaction() as conn:
        job = enqueue(conn, "event_dispatch", {"e": 1}, trace_id=trace)
    assert scalar(fresh, "SELECT traceparent FROM workflow_jobs WHERE id = :i", i=job.id) is None
    run_pool(
        "outbound",
        lambda: scalar(fresh, "SELECT status FROM workflow_jobs WHERE id = :i", i=job.id) == "succeeded",
    )
    parent = seen[-1]["traceparent"].split("-")
    assert parent[0] == "00" and parent[1] == trace and parent[3] == "00"


def test_configuration_from_the_environment(monkeypatch):
    for var in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_TRACES_EXPORTER",
        "OTEL_SDK_DISABLED",
    ):
        monkeypatch.delenv(var, raising=False)
    assert not tracing.configured_from_env()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert tracing.configured_from_env()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not tracing.configured_from_env()
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    assert tracing.configured_from_env()
    assert tracing.parse_traceparent(f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01") == (
        CLIENT_TRACE,
        CLIENT_SPAN,
        "01",
    )
    for bad in (
        "",
        "00-xyz-abc-01",
        f"01-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
        f"00-{'0' * 32}-{CLIENT_SPAN}-01",
    ):
        assert tracing.parse_traceparent(bad) is None
