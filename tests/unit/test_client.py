"""SDK transport rules (no server): retries keep the same Idempotency-Key; typed errors carry codes;
revisions are ints; numbers and null survive exactly."""

from __future__ import annotations

import http.server
import threading

import httpx
import pytest

from ledgerflow.client import (
    ABSENT,
    Client,
    IdempotencyConflict,
    LimitExceeded,
    QuotaExceeded,
    RateLimited,
    Unavailable,
)

INSTANCE = (
    '{"id":"%s","namespace_id":"n","definition_id":"d","definition_version_id":"v","version":"v1",'
    '"state":"RUNNING","revision":"18446744073709551615","paused":false,"control_revision":"1",'
    '"input":{"n":9007199254740993,"z":null},"business_key":"k ","deadline_at":"2026-09-18T08:01:00Z",'
    '"created_at":"2026-09-18T08:00:00Z","updated_at":"2026-09-18T08:00:00.123456Z"}' % ("a" * 32)
)


def test_retries_keep_the_same_idempotency_key():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("Idempotency-Key"), request.content))
        if len(seen) == 1:
            raise httpx.ConnectError("boom", request=request)
        if len(seen) == 2:
            return httpx.Response(
                503,
                headers={"Retry-After": "0"},
                json={"code": "UNAVAILABLE", "message": "db down", "status": 503},
            )
        return httpx.Response(
            201,
            content=('{"request_id":"r","data":{"instance":' + INSTANCE + ',"deduplicated":false}}').encode(),
        )

    c = Client("http://x", "t", transport=httpx.MockTransport(handler), backoff=0.001)
    res = c.start_workflow("d" * 32, "v1", {"n": 9007199254740993, "z": None})
    assert len(seen) == 3 and len({k for k, _ in seen}) == 1 and seen[0][0]
    assert b'"n":9007199254740993' in seen[0][1] and b'"z":null' in seen[0][1]
    assert res.instance.revision == 2**64 - 1 and res.instance.input == {"n": 9007199254740993, "z": None}
    assert res.instance.output is ABSENT and res.instance.business_key == "k "


def test_typed_errors_carry_codes():
    def handler(request: httpx.Request) -> httpx.Response:
        code = {"/a": "WORKFLOW_INSTANCE_LIMIT", "/b": "IDEMPOTENCY_CONFLICT"}.get(
            request.url.path, "UNAVAILABLE"
        )
        status = {"WORKFLOW_INSTANCE_LIMIT": 409, "IDEMPOTENCY_CONFLICT": 409}.get(code, 503)
        return httpx.Response(status, json={"code": code, "message": "m", "request_id": "r"})

    c = Client("http://x", "t", transport=httpx.MockTransport(handler), retries=1, backoff=0.001)
    with pytest.raises(LimitExceeded) as e:
        c.request("POST", "/a", body={})
    assert e.value.code == "WORKFLOW_INSTANCE_LIMIT" and e.value.status == 409
    with pytest.raises(IdempotencyConflict):
        c.request("POST", "/b", body={})
    with pytest.raises(Unavailable):
        c.request("GET", "/c")


def test_rate_limited_is_retried_after_retry_after_and_a_quota_refusal_is_not():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("Idempotency-Key")))
        if request.url.path == "/full":
            return httpx.Response(429, headers={"Retry-After": "30"}, json={"code": "APPLICATION_FULL"})
        if len(seen) <= 2:
            return httpx.Response(429, headers={"Retry-After": "0"}, json={"code": "RATE_LIMITED"})
        return httpx.Response(200, json={"request_id": "r", "data": {}})

    c = Client("http://x", "t", transport=httpx.MockTransport(handler), retries=2, backoff=0.001)
    assert c.request("POST", "/a", body={}) == {"request_id": "r", "data": {}}
    assert len(seen) == 3 and len({k for _, k in seen}) == 1  # the same Idempotency-Key each time
    seen.clear()
    with pytest.raises(QuotaExceeded) as e:
        c.request("POST", "/full", body={})
    assert len(seen) == 1 and e.value.retry_after == 30  # raised at once: a quota does not clear in seconds
    seen.clear()
    c = Client("http://x", "t", transport=httpx.MockTransport(handler), retries=1, backoff=0.001)
    with pytest.raises(RateLimited) as r:
        c.request("GET", "/b")
    assert len(seen) == 2 and r.value.code == "RATE_LIMITED"  # raised once the retries run out


SIGNAL = (
    '{"id":"' + "b" * 32 + '","namespace_id":"n","workflow_id":"' + "a" * 32 + '","revision":"1",'
    '"name":"done","payload_version":"v1","target_step_key":"k","target_activation_sequence":1,'
    '"correlation_key":"c ","payload":{"n":9007199254740993},"actor_id":"a","state":"PENDING",'
    '"accepted_at":"2026-09-18T08:00:00Z","expires_at":"2026-09-18T08:01:00Z"}'
)


@pytest.mark.parametrize(
    ("call", "data"),
    [
        (
            lambda c: c.control_workflow("a" * 32, "PAUSE", 1, "r"),
            '{"instance":' + INSTANCE + ',"deduplicated":false}',
        ),
        (
            lambda c: c.send_workflow_signal(
                "a" * 32,
                name="done",
                payload_version="v1",
                target_step_key="k",
                target_activation_sequence=1,
                correlation_key="c ",
                payload={"n": 9007199254740993},
                reason="r",
            ),
            '{"signal":' + SIGNAL + ',"deduplicated":false}',
        ),
        (
            lambda c: c.recover_workflow_step("a" * 32, "SUCCEED_STEP", "k", "r", output=None),
            '{"instance":' + INSTANCE + ',"step":{},"operation_id":"o","deduplicated":false}',
        ),
        (
            lambda c: c.resolve_workflow_instance("a" * 32, "CONTINUE", "r", evidence_ref="t:1"),
            '{"instance":'
            + INSTANCE
            + ',"resolution":{"resolution":"CONTINUE"},"operation_id":"o","deduplicated":false}',
        ),
    ],
)
def test_control_signal_recovery_calls_retry_with_the_same_key(call, data):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("Idempotency-Key"), request.content))
        if len(seen) == 1:
            return httpx.Response(
                503, headers={"Retry-After": "0"}, json={"code": "UNAVAILABLE", "status": 503}
            )
        return httpx.Response(200, content=('{"request_id":"r","data":' + data + "}").encode())

    c = Client("http://x", "t", transport=httpx.MockTransport(handler), backoff=0.001)
    res = call(c)
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0][0]  # same key, same body
    assert not res.deduplicated


def test_closing_one_client_leaves_a_shared_transport_to_the_others():
    """Regression: ``Client.close()`` closed the transport it was given, and with it every connection of
    that pool, also the one another Client sharing the transport was reading its answer from. That
    reader then waited on a closed descriptor (or on the new connection that reused its number) until
    its 40 s read timeout, and resent the request: the bench's 4 starting threads share one counting
    transport, and the first to finish stalled another's start_workflow for 20-40 s (decision "A
    transport given to Client is the caller's")."""
    arrived, answer, paths = threading.Event(), threading.Event(), []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # kept-alive connections, as gunicorn's

        def do_GET(self) -> None:
            paths.append(self.path)
            arrived.set()
            answer.wait(10)
            body = b'{"ok":true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    shared = httpx.HTTPTransport()
    try:
        reader = Client(base, "t", transport=shared, timeout=5, retries=0)
        got: list[object] = []
        t = threading.Thread(target=lambda: got.append(_call(reader, "/slow")))
        t.start()
        assert arrived.wait(5)  # the reader's request is in: it is waiting for the answer
        Client(base, "t", transport=shared).close()  # another client of the same transport is done
        answer.set()
        t.join(10)
        assert got == [{"ok": True}]  # answered, not cut off nor timed out
        assert paths == ["/slow"]  # and not resent
        assert _call(Client(base, "t", transport=shared, retries=0), "/after") == {"ok": True}
    finally:
        answer.set()
        shared.close()
        server.shutdown()
        server.server_close()


def _call(client: Client, path: str) -> object:
    try:
        return client.request("GET", path)
    except Exception as exc:  # the assertion shows it
        return exc
