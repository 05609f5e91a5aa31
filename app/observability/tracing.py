"""OpenTelemetry tracing: off (``ENABLED`` is False, every hook is one boolean check) unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set or
``OTEL_TRACES_EXPORTER`` names ``otlp`` or ``console`` (``OTEL_SDK_DISABLED=true`` wins).

One trace per business request: the Flask request span (its parent comes from an incoming
``traceparent``) -> every job enqueued inside it stores the current span as its W3C ``traceparent``
(column ``workflow_jobs.traceparent``) -> each attempt of the job is a span whose parent is that
traceparent -> the handler's outbound HTTP calls are child spans (httpx instrumentation), and
``traceparent`` is sent on them; jobs enqueued by a handler take the attempt span as parent.
A job without a traceparent (enqueued while tracing was off) still joins the trace of its ledger
``trace_id`` when that id is 32 hex (the attempt span then has a remote parent with that trace id).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from app import sql
from app.settings import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_SDK_DISABLED,
    OTEL_SERVICE_NAME,
    OTEL_TRACES_EXPORTER,
)


class Attempt(Protocol):
    """What an attempt span reads of a job context (``app.ledger.context.JobContext``); a protocol,
    so this core module does not depend on the ledger that uses it."""

    job_id: int
    type: str
    queue: str
    attempt: int
    generation: int
    trace_id: str
    instance_id: str | None
    attempt_id: Any


log = logging.getLogger(__name__)

ENABLED = False
_provider: Any = None
_tracer: Any = None
_instrumented: list[Any] = []


def _endpoint() -> str | None:
    return OTEL_EXPORTER_OTLP_ENDPOINT.get() or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT.get()


def configured_from_env() -> bool:
    if OTEL_SDK_DISABLED.get():
        return False
    exporters = OTEL_TRACES_EXPORTER.get()
    if exporters == {"none"}:
        return False
    return bool(_endpoint()) or bool(exporters & {"otlp", "console"})


def setup(service: str, *, exporter: Any = None, set_global: bool = True) -> bool:
    """Configure tracing for this process if the environment asks for it (or ``exporter`` is given,
    e.g. the in-memory exporter of a test: spans are then exported synchronously). Idempotent.
    Returns whether tracing is on."""
    global ENABLED, _provider, _tracer
    if _provider is not None:
        return True
    if exporter is None and not configured_from_env():
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    name = OTEL_SERVICE_NAME.get() or f"ledgerflow-{service}"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        wanted = OTEL_TRACES_EXPORTER.get() or {"otlp"}
        if "console" in wanted:
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        if "otlp" in wanted or _endpoint():
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if set_global:
        trace.set_tracer_provider(provider)
    _provider = provider
    _tracer = provider.get_tracer("ledgerflow")
    _instrument_libraries(provider)
    ENABLED = True
    sql.trace_statements((db_span, end_db_span))
    log.info("tracing on: service %s", name)
    return True


def _instrument_libraries(provider: Any) -> None:
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    httpx_inst = HTTPXClientInstrumentor()
    httpx_inst.instrument(tracer_provider=provider)
    _instrumented.append(httpx_inst)
    # SQL spans are app.sql's own (db_span), one per statement it runs, named: no driver or ORM
    # instrumentation, so the statements sent do not depend on whether tracing is on


def shutdown() -> None:
    """Flush and turn tracing off again (tests; process exit flushes by itself)."""
    global ENABLED, _provider, _tracer
    ENABLED = False
    sql.trace_statements(None)
    for inst in _instrumented:
        try:
            inst.uninstrument()
        except Exception:
            pass
    _instrumented.clear()
    if _provider is not None:
        _provider.shutdown()
    _provider = _tracer = None


def instrument_flask(app: Any) -> None:
    if ENABLED:
        from opentelemetry.instrumentation.flask import FlaskInstrumentor

        FlaskInstrumentor().instrument_app(app, tracer_provider=_provider, enable_commenter=False)


# ----------------------------------------------------------------------------------------- context
def current_traceparent() -> str | None:
    """The W3C traceparent of the current span (None when tracing is off or no span is active)."""
    if not ENABLED:
        return None
    from opentelemetry import trace

    sc = trace.get_current_span().get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def current_trace_id() -> str | None:
    """The current span's trace id (32 hex), used as the ledger trace id of what a request starts."""
    if not ENABLED:
        return None
    from opentelemetry import trace

    sc = trace.get_current_span().get_span_context()
    return f"{sc.trace_id:032x}" if sc.is_valid else None


def _is_hex(value: str, n: int) -> bool:
    return len(value) == n and all(c in "0123456789abcdef" for c in value) and value != "0" * n


def parse_traceparent(value: str | None) -> tuple[str, str, str] | None:
    """(trace id, parent span id, flags) of a version-00 traceparent, or None."""
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) != 4 or parts[0] != "00" or not _is_hex(parts[1], 32) or not _is_hex(parts[2], 16):
        return None
    if len(parts[3]) != 2:
        return None
    return parts[1], parts[2], parts[3]


def _parent_context(traceparent: str | None, trace_id: str | None, attempt_id: int) -> Any:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    parsed = parse_traceparent(traceparent)
    if parsed is None and trace_id and _is_hex(trace_id, 32):
        # no recorded parent: join the ledger trace id's trace under a stand-in parent span id
        parsed = (trace_id, f"{(attempt_id or 1) & 0xFFFFFFFFFFFFFFFF:016x}", "01")
    if parsed is None:
        return None
    sc = SpanContext(
        trace_id=int(parsed[0], 16),
        span_id=int(parsed[1], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(parsed[2], 16)),
    )
    return trace.set_span_in_context(NonRecordingSpan(sc))


@contextmanager
def attempt_span(ctx: Attempt) -> Iterator[Any]:
    """The span of one attempt (kind CONSUMER), current while the handler runs."""
    from opentelemetry.trace import SpanKind, use_span

    attributes = {
        "ledgerflow.job.id": ctx.job_id,
        "ledgerflow.job.type": ctx.type,
        "ledgerflow.job.queue": ctx.queue,
        "ledgerflow.job.attempt": ctx.attempt,
        "ledgerflow.job.generation": ctx.generation,
        "ledgerflow.trace_id": ctx.trace_id,
    }
    if ctx.instance_id:
        attributes["ledgerflow.instance_id"] = ctx.instance_id
    parent = _parent_context(getattr(ctx, "traceparent", None), ctx.trace_id, ctx.attempt_id)
    span = _tracer.start_span(
        f"job {ctx.type}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
    )
    with use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        yield span


def end_attempt(span: Any, outcome_kind: str, error: str | None) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("ledgerflow.outcome", outcome_kind)
    if outcome_kind not in ("succeeded", "skipped"):
        span.set_status(Status(StatusCode.ERROR, (error or outcome_kind)[:256]))


def outbound_traceparent(trace_id: str | None, attempt_id: int) -> str | None:
    """Tracing off: a traceparent naming the ledger trace id (when it is 32 hex) and the attempt, so a
    receiver can still correlate the call with the job (not sampled: no span was recorded)."""
    if not trace_id or not _is_hex(trace_id, 32):
        return None
    return f"00-{trace_id}-{(attempt_id or 1) & 0xFFFFFFFFFFFFFFFF:016x}-00"


def span_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span for log lines, or None."""
    if not ENABLED:
        return None
    from opentelemetry import trace

    sc = trace.get_current_span().get_span_context()
    return (f"{sc.trace_id:032x}", f"{sc.span_id:016x}") if sc.is_valid else None


def db_span(name: str, statement: str) -> Any:
    """A CLIENT span of one SQL statement (``app.sql``: one per execution, named ``db <statement name>``),
    a child of the current span; ended by ``end_db_span``."""
    from opentelemetry.trace import SpanKind

    return _tracer.start_span(
        f"db {name}",
        kind=SpanKind.CLIENT,
        attributes={"db.system": "postgresql", "db.operation.name": name, "db.query.text": statement},
    )


def end_db_span(span: Any, error: BaseException | None) -> None:
    """End a statement's span; an error marks it (its class only: parameters never reach a span)."""
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, type(error).__name__))
    span.end()
