"""Structured logs: one JSON object per line with the context ids that apply, readable console lines
at a terminal, and no secret ever written (tokens, passwords in URLs, password=/token= values)."""

from __future__ import annotations

import io
import json
import logging

from app.observability import logs


def _capture(fmt: str) -> tuple[io.StringIO, logging.Logger, logging.Handler]:
    stream = io.StringIO()
    handler = logs.make_handler(stream, fmt)
    logger = logging.getLogger(f"test.logs.{fmt}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return stream, logger, handler


def test_json_lines_carry_the_context_and_mask_secrets():
    stream, log, _ = _capture("json")
    logs.set_process_context(node_id="n" * 32)
    token = "lf_" + "A1b2" * 11
    try:
        with logs.bind(job_id=42, attempt=3, trace_id="t" * 32, instance_id="i" * 32):
            log.info("claimed with %s via postgresql://app:hunter2@db:5432/x", token)
            with logs.bind(request_id="req_1", namespace="ops"):
                log.warning("header Authorization: Bearer %s password=hunter2 api_key=k-123", token)
        log.info("outside", extra={"token": "plain-secret", "route": "/metrics"})
        try:
            raise RuntimeError(f"connect failed for {token}")
        except RuntimeError:
            log.exception("boom")
    finally:
        logs._process.clear()
    text = stream.getvalue()
    assert "hunter2" not in text and token not in text and "plain-secret" not in text and "k-123" not in text
    lines = [json.loads(line) for line in text.splitlines()]  # one JSON object per line
    assert len(lines) == 4
    first, second, third, fourth = lines
    assert first["message"].startswith("claimed with lf_***")
    assert "postgresql://app:***@db:5432/x" in first["message"]
    assert {"time", "level", "logger", "message"} <= set(first)
    assert (first["job_id"], first["attempt"], first["trace_id"], first["instance_id"], first["node_id"]) == (
        42,
        3,
        "t" * 32,
        "i" * 32,
        "n" * 32,
    )
    assert "request_id" not in first
    assert (second["request_id"], second["namespace"], second["job_id"]) == ("req_1", "ops", 42)
    assert "password=***" in second["message"] and "api_key=***" in second["message"]
    assert "job_id" not in third and third["token"] == "***" and third["route"] == "/metrics"
    assert fourth["level"] == "ERROR" and "lf_***" in fourth["exc_info"]


def test_console_format_for_people():
    stream, log, _ = _capture("console")
    with logs.bind(job_id=7, attempt=1):
        log.info("hello %s", "world")
    line = stream.getvalue().strip()
    assert " INFO test.logs.console: hello world [job_id=7 attempt=1]" in line
    assert not line.startswith("{")


def test_format_defaults_to_json_unless_a_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("LOG_FORMAT", raising=False)
    assert logs.log_format(io.StringIO()) == "json"
    assert logs.log_format(Tty()) == "console"
    monkeypatch.setenv("LOG_FORMAT", "json")
    assert logs.log_format(Tty()) == "json"


def test_web_requests_log_their_request_id_namespace_and_route(client, monitor):
    stream = io.StringIO()
    handler = logs.make_handler(stream, "json")
    access = logging.getLogger("ledgerflow.access")
    access.addHandler(handler)
    old_level = access.level
    access.setLevel(logging.INFO)
    try:
        resp = client.get("/api/workflows/engine/jobs?limit=1", headers=monitor)
    finally:
        access.removeHandler(handler)
        access.setLevel(old_level)
    assert resp.status_code == 200
    [line] = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert line["request_id"] == resp.headers["X-Request-Id"]
    assert line["namespace"] == "ops"
    assert (line["route"], line["status"], line["method"]) == ("/api/workflows/engine/jobs", 200, "GET")
    assert "lf_" not in stream.getvalue()
    assert "request_id" not in logs.current_fields()  # outside a request: no request fields
