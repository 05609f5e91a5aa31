"""A real local webhook receiver for the tests and the benchmark: a threaded HTTP server on 127.0.0.1
(a port of 5400-5499) that records every request and answers by path:

- ``/ok``: 200;
- ``/flaky``: 500 to the first two requests of each ``webhook-id``, then 200;
- ``/slow``: 200 after ``slow_seconds``;
- ``/gone``: 410;
- ``/busy``: 429 with ``Retry-After: 120``.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    server: http.server.ThreadingHTTPServer
    slow_seconds: float = 1.5
    requests: list[Received] = field(default_factory=list)
    acked: Counter = field(default_factory=Counter)  # webhook-id -> 2xx answers sent
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def received(self, path: str | None = None) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if path is None or r.path == path]

    def ids(self, path: str | None = None) -> Counter:
        return Counter(r.headers.get("webhook-id") for r in self.received(path))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_receiver(slow_seconds: float = 1.5) -> Receiver:
    holder: dict[str, Receiver] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a) -> None:
            pass

        def do_POST(self) -> None:
            rec = holder["r"]
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            wid = self.headers.get("webhook-id", "")
            with rec.lock:
                rec.requests.append(Received(self.path, dict(self.headers), body, time.monotonic()))
                seen = sum(
                    1 for r in rec.requests if r.headers.get("webhook-id") == wid and r.path == self.path
                )
            code = 200
            if self.path == "/flaky" and seen <= 2:
                code = 500
            elif self.path == "/gone":
                code = 410
            elif self.path == "/busy":
                code = 429
            elif self.path == "/slow":
                time.sleep(rec.slow_seconds)
            if 200 <= code < 300:
                with rec.lock:
                    rec.acked[wid] += 1
            try:
                self.send_response(code)
                if code == 429:
                    self.send_header("Retry-After", "120")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:
                pass  # the sender is gone (killed mid-delivery)

    for port in range(5400, 5500):
        try:
            server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
            break
        except OSError:
            continue
    else:  # pragma: no cover
        raise RuntimeError("no free port in 5400-5499")
    server.daemon_threads = True
    rec = Receiver(server, slow_seconds)
    holder["r"] = rec
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return rec
