"""gunicorn hooks of the ``web`` process, loaded by ``gunicorn.conf.py`` (the serving model, gevent,
is set there): its own logs in the same JSON / console format as every other process (the app logs
one access line per request itself, with the request id), the Prometheus multiprocess clean-up
of exited workers, each worker's start-up heap frozen once its app is loaded (``app.process``), and
the graceful stop: on SIGTERM a worker stops accepting (gunicorn) and its waiting long-poll claims
answer at once (``web.long_poll.shut_down``), so it is out in a second or two instead of waiting
for a 30 s poll; other requests get the shutdown grace (``graceful_timeout``).

Connection timeouts (docs/operations.md "Serving model"): a client holds a worker's connection slot
(``worker_connections``) only while it keeps talking.

- **Slow headers**: a request's line and headers must arrive within ``header_timeout()`` seconds of the
  connection (or of the previous response on a kept-alive connection); gunicorn's ``keepalive`` bounds
  that wait in the gevent worker, so it is set to this value. Then the connection is closed.
- **Idle connection**: once the headers are in, any read (the body) or write (the response) that makes
  no progress for ``idle_timeout()`` seconds ends the connection: ``TimeoutGeventWorker`` gives every
  client socket that timeout (a body read that times out answers 400 and closes). A long poll waiting
  for a task sends and reads nothing meanwhile, so it is not cut by it.
"""

import math
import secrets
import signal
import sys

import gevent
from gunicorn.glogging import Logger
from gunicorn.workers.ggevent import GeventWorker

from app import settings
from app.observability import logs, metrics
from app.process import freeze_startup_heap
from web import long_poll

settings.exit_on_bad_settings()  # in the master, before it binds: one line naming the variable, exit 2
logconfig_dict = logs.gunicorn_logconfig()
graceful_timeout = math.ceil(settings.SHUTDOWN_GRACE_SECONDS.get())


def header_timeout() -> int:
    """Seconds a client has to send a request's line and headers (``LEDGERFLOW_HTTP_HEADER_TIMEOUT``)."""
    return settings.HTTP_HEADER_TIMEOUT.get()


def idle_timeout() -> float:
    """Seconds a connection may make no progress while its body is read or its answer written
    (``LEDGERFLOW_HTTP_IDLE_TIMEOUT``)."""
    return settings.HTTP_IDLE_TIMEOUT.get()


class TimeoutGeventWorker(GeventWorker):
    """gunicorn's gevent worker whose client sockets time out after ``idle_timeout()`` without progress
    (the stock worker makes them fully blocking: a client that sends half a body held its slot forever)."""

    def handle(self, listener, client, addr):  # gunicorn's signature
        client.settimeout(idle_timeout())
        super(GeventWorker, self).handle(listener, client, addr)  # the async worker's loop, not setblocking


class AppAccessLogger(Logger):
    """gunicorn's logger without gunicorn's access line: the app writes one access line per request itself
    (with its request id, ``web/observability.py``), and ``gunicorn.access`` is set to WARNING, yet
    gunicorn's ``access`` built the line's atoms for every request before its logger dropped it (~2 % of
    a web worker's CPU under load, py-spy)."""

    def access(self, resp, req, environ, request_time):  # gunicorn's signature
        return None


def on_starting(server):  # gunicorn's hook signature
    """In the master, before any worker: production refuses to start on a missing key, one line per
    problem and no traceback; in development without ``LEDGERFLOW_SECRET_KEY`` the master makes one
    that every worker inherits, so a console session made by one worker is valid in the other
    (`ledgerflow dev` passes one kept under .data/, which also survives restarts)."""
    problems = settings.production_problems()
    if problems:
        sys.stderr.write(
            "".join(f"ledgerflow: refusing to start (LEDGERFLOW_ENV=production): {p}\n" for p in problems)
        )
        raise SystemExit(1)  # in the master, before any worker exists
    if not settings.is_production():
        settings.SECRET_KEY.provide(lambda: secrets.token_urlsafe(48))  # inherited by the forked workers


def post_worker_init(worker):  # gunicorn's hook signature
    freeze_startup_heap()  # the app is loaded: its objects leave the collector's full scans
    end_long_polls_on_sigterm(worker)


def end_long_polls_on_sigterm(worker) -> None:
    """Wrap the worker's SIGTERM handler (gunicorn's graceful stop): also end the waiting claims now."""
    stop_accepting = worker.handle_exit  # gunicorn's SIGTERM handler: alive = False

    def handle_exit(sig, frame):
        stop_accepting(sig, frame)
        gevent.spawn(long_poll.shut_down)  # out of the signal handler: it takes a lock (as gunicorn's quit)

    signal.signal(signal.SIGTERM, handle_exit)
    signal.siginterrupt(signal.SIGTERM, False)


def child_exit(server, worker):  # gunicorn's hook signature
    metrics.mark_process_dead(worker.pid)
