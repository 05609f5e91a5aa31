"""OWASP API4:2023 Unrestricted Resource Consumption by slow clients, on the Procfile's real ``web``
process (gunicorn with its gevent worker, ``gunicorn.conf.py``). Connections that sent half a
request were never timed out: each held one of the worker's ``worker_connections`` slots for good, and
enough of them (1,500) made ``/healthz`` wait. Now a request's headers must arrive within
``LEDGERFLOW_HTTP_HEADER_TIMEOUT`` and a connection that makes no progress for
``LEDGERFLOW_HTTP_IDLE_TIMEOUT`` is closed; and a chunked body over 512 KiB is 413 there too. Deadlines
are generous (a busy machine); what is asserted is that the server lets go, not how fast."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.security.hostile import author, procfile_web

HELD = 250  # more than one worker's 200 connection slots


@pytest.fixture(scope="module")
def web(tmp_path_factory) -> Iterator[str]:
    """The Procfile's ``web`` command, one worker, short connection timeouts (one for the module)."""
    with procfile_web(
        tmp_path_factory.mktemp("web"), LEDGERFLOW_HTTP_HEADER_TIMEOUT="1", LEDGERFLOW_HTTP_IDLE_TIMEOUT="2"
    ) as url:
        yield url


def _connect(url: str, data: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(data)
    return s


def _let_go(s: socket.socket, deadline: float) -> bytes:
    """What the server sends before it closes the connection (b"" for a plain close); fails when the
    server still holds the connection at ``deadline``."""
    s.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        got = b""
        while chunk := s.recv(4096):
            got += chunk
        return got
    except TimeoutError:
        pytest.fail("the server still holds a connection that sent half a request")
    except ConnectionResetError:
        return b""
    finally:
        s.close()


HALF_HEADERS = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"


def _half_body(token: str) -> bytes:
    return (
        f"POST /v1/workflows HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Idempotency-Key: {uuid.uuid4().hex}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        '{"definition_id": "'
    ).encode()


def test_half_a_request_is_let_go(web, ops):
    token = author(ops.ns.name).token
    headers, body = _connect(web, HALF_HEADERS), _connect(web, _half_body(token))
    deadline = time.monotonic() + 60
    assert _let_go(headers, deadline) == b""  # no request: closed without an answer
    assert _let_go(body, deadline).startswith(b"HTTP/1.1 400")  # the body never came: 400, closed


def test_held_connections_do_not_keep_the_server_from_answering(web):
    form = (
        b"POST /console/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: 1000\r\n\r\ntoken="
    )
    held = [_connect(web, form) for _ in range(HELD)]
    try:
        assert httpx.get(web + "/healthz", timeout=60).status_code == 200
    finally:
        for s in held:
            s.close()


def test_a_chunked_body_over_the_limit_is_413_on_the_real_server(web, ops):
    token = author(ops.ns.name).token

    def chunks():  # no Content-Length: Transfer-Encoding: chunked
        yield b'{"name": "'
        for _ in range(600):
            yield b"x" * 1024
        yield b'"}'

    resp = httpx.post(
        web + "/v1/automation-rules",
        content=chunks(),
        timeout=60,
        headers={
            "Authorization": f"Bearer {token}",
            "Idempotency-Key": uuid.uuid4().hex,
            "Content-Type": "application/json",
        },
    )
    assert resp.status_code == 413, resp.text


def _chunked(token: str, chunks: bytes) -> bytes:
    """A POST whose body is sent with ``Transfer-Encoding: chunked``: ``chunks`` is the encoded body."""
    return (
        f"POST /v1/automation-rules HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Idempotency-Key: {uuid.uuid4().hex}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode() + chunks


@pytest.mark.parametrize(
    "chunks",
    [
        b"18\r\n" + b'{"name": "a-chunked-rule"}' + b"\r\n0\r\n\r\n",  # 26 bytes sent as 24: no CRLF after it
        b"1e\r\n" + b'{"name": "a-chunked-rule"}' + b"\r\n0\r\n\r\n",  # 26 bytes sent as 30: no CRLF after it
        b"zz\r\n" + b'{"name": "a-chunked-rule"}' + b"\r\n0\r\n\r\n",  # a size that is not hex
    ],
    ids=["size-too-small", "size-too-large", "size-not-hex"],
)
def test_a_malformed_chunked_body_is_400_on_the_real_server(web, ops, chunks):
    """A chunked body whose encoding is broken is a body cut short: 400 (it was an unhandled 500), and the
    connection is closed (where the next request would start is unknown)."""
    answer = _let_go(_connect(web, _chunked(author(ops.ns.name).token, chunks)), time.monotonic() + 60)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"INVALID_ARGUMENT" in answer
