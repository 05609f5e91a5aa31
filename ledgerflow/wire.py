"""The SDK's HTTP/1.1 connections: kept-alive ``http.client`` connections to the one server a ``Client``
talks to, and the one shape of an answer (``Answer``) whichever way a request went.

``Client`` sends through ``Connections`` unless it was given an httpx ``transport`` or a proxy applies to
its server (``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` and ``NO_PROXY``, as httpx reads them): then
through ``httpx.Client``, which speaks proxies. Both verify HTTPS alike (httpx's own SSL context: its CA
bundle, ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``). The reason is the CPU of the machine that runs task workers:
a small JSON request costs the client ~0.26 ms through ``http.client`` and ~0.75-0.95 ms through
``httpx.Client`` (``python -m bench.http_client``), and a task worker sends one or two per task.

A connection serves one request at a time; concurrent requests (a ``TaskWorker``'s slots, heartbeats and
claims) each take an idle one or open a new one, and give it back once its answer is read. A request that
fails on a connection that had served before (the server closed it while idle: gunicorn's keep-alive) is
sent once more at once on a new connection; every other failure is a ``TransportFailure``, which the
``Client`` retries as it retries any network error (with the same Idempotency-Key)."""

from __future__ import annotations

import http.client
import ssl
import threading
import urllib.request
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol
from urllib.parse import quote, urlsplit

import httpx

# connections kept idle per Client (more concurrent requests open more; the surplus is closed on return)
MAX_IDLE = 16


class Headers(Protocol):
    """An answer's headers: ``get`` by a name in any case (httpx.Headers, http.client.HTTPMessage)."""

    def get(self, name: str, default: Any = None) -> Any: ...


class Answer(NamedTuple):
    """A server's answer: what the SDK reads of it."""

    status_code: int
    content: bytes
    headers: Headers
    reason_phrase: str
    path: str  # the request's path on the server (without the query)

    @classmethod
    def of(cls, resp: httpx.Response) -> Answer:
        return cls(resp.status_code, resp.content, resp.headers, resp.reason_phrase, resp.request.url.path)


class TransportFailure(Exception):
    """No answer: the connection could not be made, broke, or the answer did not come in time."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def reason_of(exc: BaseException) -> str:
    """One line for a connection's failure, as the SDK's errors name it."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ConnectionRefusedError) or "refused" in text.lower():
        return "connection refused"
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "no answer in time"
    return text


def proxied(base_url: str) -> bool:
    """Whether the environment routes requests to ``base_url`` through a proxy (as httpx's ``trust_env``
    reads it: the scheme's proxy or ``ALL_PROXY``, unless ``NO_PROXY`` names the host)."""
    parts = urlsplit(base_url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


def query_string(params: Mapping[str, Any]) -> str:
    """``params`` as httpx encodes them: ``None`` and booleans as httpx spells them, a list or tuple
    as the key repeated."""
    pairs: list[str] = []
    for key, value in params.items():
        for v in value if isinstance(value, list | tuple) else [value]:
            pairs.append(f"{quote(str(key), safe='')}={quote(_primitive(v), safe='')}")
    return "&".join(pairs)


def _primitive(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return ""
    return str(value)


class Connections:
    """Kept-alive HTTP/1.1 connections to the origin of ``base_url`` (its path is every request's
    prefix); ``headers`` go with every request. Thread-safe."""

    def __init__(self, base_url: str, *, timeout: float, headers: Mapping[str, str]) -> None:
        parts = urlsplit(base_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._ssl: ssl.SSLContext | None = httpx.create_ssl_context() if parts.scheme == "https" else None
        self._timeout = timeout
        self._headers = dict(headers)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def request(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None,
        params: Mapping[str, Any] | None,
        headers: Mapping[str, str],
    ) -> Answer:
        target = self._prefix + path
        url = f"{target}?{query_string(params)}" if params else target
        sent = {**self._headers, **headers}
        conn, reused = self._take()
        while True:
            try:
                return self._exchange(conn, method, url, content, sent, target)
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if not reused or isinstance(exc, TimeoutError):
                    raise TransportFailure(reason_of(exc)) from exc
            # the server closed the idle connection: once more on a new one
            conn, reused = self._new(), False

    def close(self) -> None:
        with self._lock:
            self._closed, idle, self._idle = True, self._idle, []
        for conn in idle:
            conn.close()

    # -- the connections -----------------------------------------------------------------------
    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._new(), False

    def _new(self) -> http.client.HTTPConnection:
        if self._ssl is not None:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout, context=self._ssl
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        url: str,
        content: bytes | None,
        headers: dict[str, str],
        target: str,
    ) -> Answer:
        conn.request(method, url, body=content, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.will_close:
            conn.close()
        else:
            self._give_back(conn)
        return Answer(resp.status, body, resp.headers, resp.reason, target)

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()
