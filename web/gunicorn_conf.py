"""gunicorn hooks of the ``web`` process, loaded by ``gunicorn.conf.py`` (the serving model, gevent,
is set there): its own logs in the same JSON / console format as every other process (the app logs
one access line per request itself, with the request id), the Prometheus multiprocess clean-up
of exited workers, each worker's start-up heap frozen once its app is loaded (``app.process``), and
the graceful stop: on SIGTERM a worker stops accepting (gunicorn) and its waiting long-poll claims
answer at once (``web.long_poll.shut_down``), so it is out in a second or two instead of waiting
for a 30 s poll; other requests get the shutdown grace (``graceful_timeout``)."""

import math
import signal

import gevent

from app import settings
from app.observability import logs, metrics
from app.process import settle_startup_heap
from web import long_poll

settings.exit_on_bad_settings()  # in the master, before it binds: one line naming the variable, exit 2
logconfig_dict = logs.gunicorn_logconfig()
graceful_timeout = math.ceil(settings.SHUTDOWN_GRACE_SECONDS.get())


def post_worker_init(worker):  # noqa: ANN001, ANN201 - gunicorn's hook signature
    settle_startup_heap()  # the app is loaded: its objects leave the collector's full scans
    end_long_polls_on_sigterm(worker)


def end_long_polls_on_sigterm(worker) -> None:  # noqa: ANN001
    """Wrap the worker's SIGTERM handler (gunicorn's graceful stop): also end the waiting claims now."""
    stop_accepting = worker.handle_exit  # gunicorn's SIGTERM handler: alive = False

    def handle_exit(sig, frame):  # noqa: ANN001, ANN202
        stop_accepting(sig, frame)
        gevent.spawn(long_poll.shut_down)  # out of the signal handler: it takes a lock (as gunicorn's quit)

    signal.signal(signal.SIGTERM, handle_exit)
    signal.siginterrupt(signal.SIGTERM, False)


def child_exit(server, worker):  # noqa: ANN001, ANN201 - gunicorn's hook signature
    metrics.mark_process_dead(worker.pid)
