"""gunicorn configuration of the ``web`` process (Procfile: ``--config gunicorn.conf.py``).

Serving model (docs/operations.md "Serving model"): the ``gevent`` worker class. A request
is a greenlet, so a long-poll task claim waiting up to 30 s holds no OS thread and costs a few KiB;
``worker_connections`` bounds the requests one worker serves at once; slow-header and idle connection
timeouts keep a client from holding a slot without talking (``web/gunicorn_conf.py``).

gevent must patch the standard library before anything imports ``socket``, ``ssl``, ``select`` or
psycopg (psycopg picks its wait function at import: only a patched ``select`` makes it cooperate).
That is why this file lives outside the ``web`` package, whose ``__init__`` imports the whole app:
it patches first, then takes the logging and metrics hooks from ``web/gunicorn_conf.py``."""

from gevent import monkey

monkey.patch_all()

from app import settings  # noqa: E402 - after the patching, on purpose (it imports only the standard library)

# a bad setting stops the master with one line before the app is imported (importing it reads settings)
settings.exit_on_bad_settings()

from web import green_wait  # noqa: E402 - after the patching, on purpose
from web.gunicorn_conf import (  # noqa: E402 - after the patching, on purpose
    AppAccessLogger,
    TimeoutGeventWorker,
    child_exit,  # noqa: F401 - a gunicorn hook
    graceful_timeout,  # noqa: F401 - gunicorn's setting
    header_timeout,
    logconfig_dict,  # noqa: F401 - gunicorn's logging
    on_starting,  # noqa: F401 - a gunicorn hook
    post_worker_init,  # noqa: F401 - a gunicorn hook
)

green_wait.install()  # psycopg asks the kernel first, gevent's hub only when not ready (web/green_wait.py)

# gevent, with client sockets that time out when idle (web/gunicorn_conf.py, docs/operations.md)
worker_class = TimeoutGeventWorker
logger_class = AppAccessLogger  # the app logs each request itself
worker_connections = 200
# the wait for a request's line and headers (the first one, and between kept-alive requests)
keepalive = header_timeout()
# gunicorn's own request line / header size limits, stated (their defaults): 4094 bytes a line, 100
# header fields of at most 8190 bytes each
limit_request_line = 4094
limit_request_fields = 100
limit_request_field_size = 8190
