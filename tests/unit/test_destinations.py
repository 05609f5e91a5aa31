"""The outbound destination policy (X-EVENT): a table of forbidden destinations, in every numeric
spelling, all refused before any connection; the allow-list; connecting to the checked address with
Host kept; the body byte cap and total deadline; URL redaction. No database: a local receiver only."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from app.ledger import destinations
from app.ledger.destinations import DestinationForbidden, Policy, check, parse_policy
from app.ledger.http import MAX_BODY_BYTES, DestinationRefused, SafeHttp, retry_after_seconds
from app.observability.logs import redact_url

FAKE_DNS = {
    "metadata.google.internal": ["169.254.169.254"],
    "internal.example": ["10.1.2.3"],
    "rebind.example": ["93.184.216.34", "127.0.0.1"],  # one good, one loopback: refused
    "v6-local.example": ["::1"],
    "example.com": ["93.184.216.34"],
    "receiver.test": ["127.0.0.1"],
}


def fake_resolver(host: str, port: int) -> list[str]:
    if host not in FAKE_DNS:
        raise socket.gaierror("unknown host")
    return FAKE_DNS[host]


FORBIDDEN = [
    # loopback, every spelling
    "http://127.0.0.1/",
    "http://127.1.2.3/",
    "https://127.0.0.1:8443/hook",
    "http://127.0.0.1./",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://017700000001/",
    "http://0x7f.0.0.1/",
    "http://0x7f000001/",
    "http://0x7F.1/",
    "http://127.1/",
    "http://127.0.1/",
    "http://example.com@127.0.0.1/",
    # private (RFC 1918), every spelling
    "http://10.0.0.1/",
    "http://10.255.255.255/",
    "http://172.16.0.1/",
    "http://172.31.255.254/",
    "http://192.168.0.1/",
    "https://192.168.1.1:443/",
    "http://167772161/",
    "http://012.0.0.1/",
    "http://0xa000001/",
    "http://0xc0.0xa8.0.1/",
    # CGNAT
    "http://100.64.0.1/",
    "http://100.127.255.254/",
    # link-local and cloud metadata
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.0.1/",
    "http://2852039166/",
    "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376/",
    # unspecified, broadcast, reserved, multicast
    "http://0.0.0.0/",
    "http://0/",
    "http://255.255.255.255/",
    "http://240.0.0.1/",
    "http://224.0.0.1/",
    "http://239.255.255.250:1900/",
    # IPv6
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::]/",
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://[fc00::1]/",
    "http://[fd00:ec2::254]/",
    "http://[ff02::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[2002:7f00:1::]/",
    # names that resolve to forbidden addresses (localhost: the system resolver)
    "http://localhost/",
    "http://localhost.:5400/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://internal.example/",
    "http://rebind.example/",
    "http://v6-local.example/",
    # not http(s), or no host
    "ftp://example.com/",
    "file:///etc/passwd",
    "gopher://example.com/",
    "http:///nohost",
    "http://exa mple.com/",
]


@pytest.fixture
def no_connections(monkeypatch) -> list:
    """Any socket connection attempt is recorded (and fails)."""
    tried: list = []

    def refuse(self, address):
        tried.append(address)
        raise AssertionError(f"connected to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return tried


def _resolver(host: str, port: int) -> list[str]:
    return fake_resolver(host, port) if host in FAKE_DNS else destinations._system_resolver(host, port)


def _ctx(deadline: float = 30.0) -> SimpleNamespace:
    return SimpleNamespace(
        operation_key="op",
        attempt_id=1,
        trace_id="t" * 32,
        deadline_monotonic=time.monotonic() + deadline,
        check=lambda: None,
    )


def test_the_table_is_large_enough() -> None:
    assert len(FORBIDDEN) >= 40 and len(set(FORBIDDEN)) == len(FORBIDDEN)


@pytest.mark.parametrize("url", FORBIDDEN)
def test_forbidden_destinations_are_refused_and_never_contacted(url, no_connections, monkeypatch) -> None:
    monkeypatch.delenv(destinations.ALLOW_ENV, raising=False)
    with pytest.raises(DestinationForbidden):
        check(url, policy=Policy(), resolver=_resolver)
    # the safe HTTP client refuses it the same way, as a permanent DESTINATION_FORBIDDEN failure
    with pytest.raises(DestinationRefused) as e:
        SafeHttp(_ctx(), resolver=_resolver).request("POST", url, step_key="s", json={})
    assert e.value.code == "DESTINATION_FORBIDDEN"
    assert no_connections == []


def test_a_global_address_passes_and_is_resolved_once() -> None:
    calls = []

    def resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        return ["93.184.216.34"]

    dest = check("https://Example.COM./hooks?x=1", policy=Policy(), resolver=resolver)
    assert calls == ["example.com"]
    assert dest.address == "93.184.216.34" and dest.host == "example.com" and dest.port == 443
    assert dest.connect_url() == "https://93.184.216.34:443/hooks?x=1"
    assert dest.host_header == "example.com"


def test_the_allow_list_opens_chosen_private_destinations() -> None:
    policy = parse_policy("127.0.0.1/32, 10.0.0.0/8, receiver.internal")
    assert check("http://127.0.0.1:5400/h", policy=policy).address == "127.0.0.1"
    assert check("http://10.9.8.7/h", policy=policy).address == "10.9.8.7"
    with pytest.raises(DestinationForbidden):
        check("http://192.168.0.1/h", policy=policy)
    with pytest.raises(DestinationForbidden):  # numeric tricks stay refused even when allowed
        check("http://2130706433/h", policy=policy)
    hosted = parse_policy("receiver.test")
    assert check("http://receiver.test:5400/", policy=hosted, resolver=fake_resolver).address == "127.0.0.1"


def test_redaction_hides_credentials_and_query_values() -> None:
    assert (
        redact_url("https://user:pw@h.example/p?token=abc&x=1") == "https://***@h.example/p?token=***&x=***"
    )
    assert redact_url("http://h.example/p") == "http://h.example/p"


def test_retry_after_forms() -> None:
    assert retry_after_seconds("7") == 7.0 and retry_after_seconds("999999") == 3600.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


# ------------------------------------------------------------------ live: a local receiver
class _Handler(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *a) -> None:
        pass

    def do_GET(self) -> None:
        _Handler.seen.append(dict(self.headers))
        if self.path == "/huge":
            self.send_response(200)
            self.send_header("Content-Length", str(4 * 1024 * 1024))
            self.end_headers()
            for _ in range(64):
                self.wfile.write(b"x" * 65536)
        elif self.path == "/slow":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b"y")
                self.wfile.flush()
                time.sleep(0.2)
        else:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")


@pytest.fixture
def local_receiver() -> Iterator[int]:
    server = None
    for port in range(5400, 5500):
        try:
            server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Handler)
            break
        except OSError:
            continue
    assert server is not None, "no free port in 5400-5499"
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_connects_to_the_checked_address_keeping_the_host(local_receiver, monkeypatch) -> None:
    monkeypatch.setenv(destinations.ALLOW_ENV, "127.0.0.1/32")
    _Handler.seen.clear()
    # receiver.test does not exist in real DNS: only the checked address can have been used
    res = SafeHttp(_ctx(), resolver=fake_resolver).request(
        "GET", f"http://receiver.test:{local_receiver}/", step_key="s"
    )
    assert res.status_code == 200 and res.text == "ok"
    assert _Handler.seen[-1]["Host"] == f"receiver.test:{local_receiver}"
    assert _Handler.seen[-1]["X-Idempotency-Key"] == "op:s"


def test_a_huge_body_is_capped_and_a_slow_one_ends_by_the_deadline(local_receiver, monkeypatch) -> None:
    monkeypatch.setenv(destinations.ALLOW_ENV, "127.0.0.1/32")
    http_ = SafeHttp(_ctx())
    big = http_.request("GET", f"http://127.0.0.1:{local_receiver}/huge", step_key="s")
    assert len(big.text) == MAX_BODY_BYTES
    started = time.monotonic()
    slow = http_.request("GET", f"http://127.0.0.1:{local_receiver}/slow", step_key="s", timeout=1.0)
    assert time.monotonic() - started < 3.0 and 0 < len(slow.text) < 100
