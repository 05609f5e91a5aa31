"""The SDK's own connections (``ledgerflow.wire``), against a real HTTP/1.1 server in this process: they
are the default of ``Client``; a proxy or a given transport sends through httpx instead; a connection
the server closed while idle is replaced without a failed call; concurrent calls each get a connection;
queries are encoded as httpx encodes them; a server that is not there is named as before."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledgerflow.client import ApiError, Client, ServerUnreachable
from ledgerflow.wire import query_string


class Server:
    """A kept-alive HTTP/1.1 server answering ``{"path", "body", "headers"}`` of each request; counts
    the connections it accepted; ``close_idle()`` closes every connection between two requests, as
    gunicorn's keep-alive timeout does. ``/missing`` answers 404 with no body."""

    def __init__(self, tls: tuple[Path, Path] | None = None) -> None:
        self.connections = 0
        self.sockets: list[socket.socket] = []
        self.release = threading.Event()
        self.release.set()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                outer.connections += 1
                outer.sockets.append(self.connection)

            def _answer(self) -> None:
                outer.release.wait(10)
                n = int(self.headers.get("Content-Length") or 0)
                if self.path.endswith("/missing"):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps(
                    {
                        "path": self.path,
                        "body": self.rfile.read(n).decode(),
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        class Quiet(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that gave up on its answer (the time-out test)

        self.http = Quiet(("127.0.0.1", 0), Handler)
        if tls is not None:  # (certificate, key)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.http.socket = ctx.wrap_socket(self.http.socket, server_side=True)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.http.server_address[1]}"

    def close_idle(self) -> None:
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.sockets.clear()

    def stop(self) -> None:
        self.release.set()
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.stop()


def test_the_default_client_keeps_one_connection_and_sends_what_httpx_sent(server):
    c = Client(server.url + "/", "tok", retries=0)
    assert c._wire is not None and c._http is None
    first = c.request("POST", "/v1/x", body={"n": 1}, idempotency_key="k1")
    second = c.request("GET", "/v1/y", params={"a": "b c", "flag": True, "many": [1, 2]})
    assert server.connections == 1  # kept alive
    assert first["path"] == "/v1/x" and json.loads(first["body"]) == {"n": 1}
    assert first["headers"]["authorization"] == "Bearer tok"
    assert first["headers"]["idempotency-key"] == "k1"
    assert first["headers"]["content-type"] == "application/json"
    assert second["path"] == "/v1/y?a=b%20c&flag=true&many=1&many=2"
    assert "idempotency-key" not in second["headers"]
    c.close()


def test_a_base_url_with_a_path_prefixes_every_request(server):
    assert Client(server.url + "/api/", "t", retries=0).request("GET", "/v1/z")["path"] == "/api/v1/z"


def test_a_connection_the_server_closed_while_idle_is_replaced_without_a_failed_call(server):
    """Without the resend on a new connection, the call after the close fails (no retries allowed)."""
    c = Client(server.url, "t", retries=0)
    assert c.request("GET", "/one")["path"] == "/one"
    server.close_idle()
    assert c.request("POST", "/two", body={})["path"] == "/two"
    assert server.connections == 2


def test_concurrent_calls_each_get_a_connection_and_come_back_to_the_pool(server):
    c = Client(server.url, "t", retries=0)
    server.release.clear()  # every answer waits until all four requests are in
    got: list[str] = []
    threads = [
        threading.Thread(target=lambda i=i: got.append(c.request("GET", f"/c{i}")["path"])) for i in range(4)
    ]
    for t in threads:
        t.start()
    for _ in range(200):
        if server.connections == 4:
            break
        threading.Event().wait(0.01)
    server.release.set()
    for t in threads:
        t.join(10)
    assert sorted(got) == ["/c0", "/c1", "/c2", "/c3"] and server.connections == 4
    assert len(c._wire._idle) == 4  # type: ignore[union-attr]
    c.request("GET", "/again")
    assert server.connections == 4


def test_a_404_without_a_body_names_the_path_as_before(server):
    with pytest.raises(ApiError) as err:
        Client(server.url + "/api", "t", retries=0).request("GET", "/missing")
    assert "/api/missing is not a Ledgerflow API at" in str(err.value)


def test_a_server_that_is_not_there_is_named_with_the_reason():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ServerUnreachable) as err:
        Client(f"http://127.0.0.1:{port}", "t", retries=1, backoff=0.001).request("GET", "/v1/x")
    assert "connection refused" in str(err.value)


def test_no_answer_in_time_is_named_and_not_resent_at_once(server):
    c = Client(server.url, "t", retries=0, timeout=0.3)
    c.request("GET", "/warm")  # a reused connection: a time-out on it is not taken for a closed one
    server.release.clear()
    with pytest.raises(ServerUnreachable) as err:
        c.request("GET", "/slow")
    server.release.set()
    assert "no answer in time" in str(err.value)
    assert server.connections == 1


def test_a_proxy_or_a_given_transport_sends_through_httpx(server, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert Client("http://example.test", "t")._http is not None
    monkeypatch.setenv("NO_PROXY", "example.test")
    assert Client("http://example.test", "t")._wire is not None
    monkeypatch.delenv("HTTP_PROXY")
    c = Client(server.url, "t", transport=httpx.HTTPTransport(), retries=0)
    assert c._wire is None
    assert c.request("GET", "/v1/q", params={"flag": False})["path"] == "/v1/q?flag=false"


_values = st.one_of(
    st.text(max_size=8), st.integers(), st.booleans(), st.none(), st.lists(st.text(max_size=4), max_size=3)
)


@given(st.dictionaries(st.text(min_size=1, max_size=6), _values, max_size=4))
def test_queries_are_encoded_as_httpx_encodes_them(params):
    """Decoded, the pairs are httpx's (each library may escape a character the other leaves)."""
    ours = parse_qsl(query_string(params), keep_blank_values=True)
    theirs = parse_qsl(urlsplit(str(httpx.Request("GET", "http://h/p", params=params).url)).query, True)
    assert ours == theirs


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https_is_verified_as_httpx_verifies_it(tmp_path, monkeypatch):
    """A server whose certificate no trusted authority signed is refused (the certificate check is on);
    with that certificate named by SSL_CERT_FILE, as httpx reads it, the same call goes through."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
        + ["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    server = Server(tls=(cert, key))
    try:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        with pytest.raises(ServerUnreachable) as err:
            Client(server.url, "t", retries=0).request("GET", "/v1/x")
        assert "certificate verify failed" in str(err.value)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        c = Client(server.url, "t", retries=0)
        assert c._wire is not None and c.request("GET", "/v1/x")["path"] == "/v1/x"
    finally:
        server.stop()
