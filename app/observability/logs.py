"""Logging for every process: one JSON object per line (python-json-logger) when ``LOG_FORMAT=json``
(the default when stderr is not a terminal), readable console lines otherwise (``LOG_FORMAT=console``).

Each record carries, where they apply: ``request_id``, ``trace_id`` (the ledger's), ``namespace``,
``instance_id``, ``job_id``, ``attempt``, ``node_id`` (and ``otel_trace_id`` / ``span_id`` when
tracing is on). Sources: the process context (``set_process_context``: node id), the job context
bound by the pool around a handler (``bind``), and providers registered by the web app (the Flask
request's id and principal). Secrets never appear: bearer tokens, ``lf_`` credentials, passwords in
URLs and ``password=`` / ``token=``-style values are masked in the message, the arguments and the
exception text before anything is written.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pythonjsonlogger.json import JsonFormatter

from app.observability import tracing
from app.settings import LOG_FORMAT, LOG_LEVEL

CONTEXT_FIELDS = (
    "request_id",
    "trace_id",
    "namespace",
    "instance_id",
    "job_id",
    "attempt",
    "node_id",
    "otel_trace_id",
    "span_id",
)

_context: ContextVar[dict[str, Any] | None] = ContextVar("ledgerflow_log_context", default=None)
_process: dict[str, Any] = {}
_providers: list[Callable[[], dict[str, Any] | None]] = []

# --------------------------------------------------------------------------------------------- secrets
MASK = "***"
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\blf_[A-Za-z0-9_\-]{8,}"), "lf_" + MASK),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]+"), r"\1 " + MASK),
    (re.compile(r"(?i)([a-z][a-z0-9+.\-]*://[^\s:/@]*:)[^\s@/]+@"), r"\1" + MASK + "@"),
    # query parameters that carry credentials: ?access_token=, &api_key=, &X-Amz-Signature=, &sig=
    (
        re.compile(
            r"(?i)([?&][^=&\s#]*(?:token|key|secret|sig|signature|password|auth)[^=&\s#]*=)[^&\s#\"']+"
        ),
        r"\1" + MASK,
    ),
    (
        re.compile(
            r"(?i)\b((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|authorization)"
            r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&}]+"
        ),
        r"\1" + MASK,
    ),
)
_SECRET_KEYS = re.compile(r"(?i)(password|passwd|secret|token|api[_-]?key|authorization|cookie)")


_URL_IN_TEXT = re.compile(r"(?i)\bhttps?://[^\s\"'<>]+")


def redact_url(url: str) -> str:
    """THE redaction of a URL (one place for every view, log line, error and audit row that
    shows a URL): user info and every query value become ``***``, the fragment is dropped."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed url>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rsplit("@", 1)[1]
    query = urlencode([(k, MASK) for k, _ in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redact_url_fields(value: Any) -> Any:
    """``value`` (a JSON document: a view, an audit row's before / after) with every string under a
    key named ``url`` passed through ``redact_url``."""
    if isinstance(value, dict):
        return {
            k: redact_url(v) if k == "url" and isinstance(v, str) else redact_url_fields(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_url_fields(v) for v in value]
    return value


def redact(text: str) -> str:
    """``text`` with every credential-looking substring masked, and every http(s) URL in it shown as
    ``redact_url`` shows it."""
    if not text:
        return text
    text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


def _redact_value(key: str, value: Any) -> Any:
    if isinstance(value, str):
        return MASK if _SECRET_KEYS.search(key) and key not in CONTEXT_FIELDS else redact(value)
    if isinstance(value, dict):
        return {k: _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_value(key, v) for v in value]
    return value


# --------------------------------------------------------------------------------------------- context
def set_process_context(**fields: Any) -> None:
    """Fields of every record of this process (e.g. ``node_id`` of a worker)."""
    _process.update({k: v for k, v in fields.items() if v is not None})


def add_context_provider(fn: Callable[[], dict[str, Any] | None]) -> None:
    """A callable asked for extra fields on every record (the web app's request context)."""
    if fn not in _providers:
        _providers.append(fn)


@contextmanager
def bind(**fields: Any) -> Iterator[None]:
    """Fields of every record logged in this context (thread / task), e.g. a job's ids."""
    current = _context.get()
    token = _context.set({**current, **fields} if current else fields)
    try:
        yield
    finally:
        _context.reset(token)


def bind_job(ctx: Any) -> Any:
    """The log context of one attempt (the pool binds it around the handler)."""
    return bind(
        job_id=ctx.job_id, attempt=ctx.attempt, trace_id=ctx.trace_id, instance_id=ctx.instance_id or None
    )


def current_fields() -> dict[str, Any]:
    out = dict(_process)
    for fn in _providers:
        try:
            extra = fn()
        except Exception:  # a provider never breaks logging
            extra = None
        if extra:
            out.update({k: v for k, v in extra.items() if v is not None})
    ctx = _context.get()
    if ctx:
        out.update({k: v for k, v in ctx.items() if v is not None})
    if tracing.ENABLED:
        ids = tracing.span_ids()
        if ids:
            out["otel_trace_id"], out["span_id"] = ids
    return out


class ContextFilter(logging.Filter):
    """Adds the context fields to a record (without overwriting what the call passed in ``extra``)
    and masks secrets in its message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        for k, v in current_fields().items():
            if not hasattr(record, k):
                setattr(record, k, v)
        if not getattr(record, "_ledgerflow_redacted", False):
            try:
                message = record.getMessage()
            except Exception:  # a bad format string: keep what we can
                message = str(record.msg)
            record.msg, record.args = redact(message), None
            record._ledgerflow_redacted = True
        return True


# --------------------------------------------------------------------------------------------- formats
class JsonLogFormatter(JsonFormatter):
    """One JSON object per line: time, level, logger, message, context fields, extras; secrets masked."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            datefmt="%Y-%m-%dT%H:%M:%S%z",
        )

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        log_data.pop("_ledgerflow_redacted", None)
        return {k: _redact_value(k, v) for k, v in log_data.items()}

    def formatException(self, ei: Any) -> str:
        text = super().formatException(ei)  # a list only with exc_info_as_array, which is off
        return redact(text if isinstance(text, str) else "\n".join(text))

    def formatStack(self, stack_info: str) -> str:
        text = super().formatStack(stack_info)  # a list only with stack_info_as_array, which is off
        return redact(text if isinstance(text, str) else "\n".join(text))


class ConsoleFormatter(logging.Formatter):
    """``time level logger: message [job_id=.. attempt=..]`` for people at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ctx = " ".join(
            f"{k}={getattr(record, k)}" for k in CONTEXT_FIELDS if getattr(record, k, None) not in (None, "")
        )
        return f"{line} [{ctx}]" if ctx else line

    def formatException(self, ei: Any) -> str:
        return redact(super().formatException(ei))


def log_format(stream: Any = None) -> str:
    fmt = LOG_FORMAT.get()
    if fmt is not None:
        return fmt
    stream = stream or sys.stderr
    try:
        return "console" if stream.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


def make_handler(stream: Any = None, fmt: str | None = None) -> logging.Handler:
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLogFormatter() if (fmt or log_format(stream)) == "json" else ConsoleFormatter())
    handler.addFilter(ContextFilter())
    handler._ledgerflow = True  # type: ignore[attr-defined]  # our mark on a stdlib handler
    return handler


def setup_logging(level: str | None = None, stream: Any = None, fmt: str | None = None) -> None:
    """Configure the root logger of this process (idempotent: replaces our own handler only)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_ledgerflow", False):
            root.removeHandler(h)
    root.addHandler(make_handler(stream, fmt))
    root.setLevel((level or LOG_LEVEL.get()).upper())
    for noisy in ("dramatiq", "pgserver"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def gunicorn_logconfig() -> dict[str, Any]:
    """``logconfig_dict`` for gunicorn: its error log through the same handler and format."""
    fmt = log_format(sys.stderr)
    formatter = (
        "app.observability.logs.JsonLogFormatter"
        if fmt == "json"
        else "app.observability.logs.ConsoleFormatter"
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"ledgerflow": {"()": formatter}},
        "filters": {"context": {"()": "app.observability.logs.ContextFilter"}},
        "handlers": {
            "ledgerflow": {
                "class": "logging.StreamHandler",
                "formatter": "ledgerflow",
                "filters": ["context"],
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": LOG_LEVEL.get(), "handlers": ["ledgerflow"]},
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["ledgerflow"], "propagate": False},
            "gunicorn.access": {"level": "WARNING", "handlers": ["ledgerflow"], "propagate": False},
        },
    }
