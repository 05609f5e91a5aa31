"""gunicorn configuration of the ``web`` process (Procfile: ``--config gunicorn.conf.py``).

Serving model (issue 9, docs/operations.md "Serving model"): the ``gevent`` worker class. A request
is a greenlet, so a long-poll task claim waiting up to 30 s holds no OS thread and costs a few KiB;
``worker_connections`` bounds the requests one worker serves at once.

gevent must patch the standard library before anything imports ``socket``, ``ssl``, ``select`` or
psycopg (psycopg picks its wait function at import: only a patched ``select`` makes it cooperate).
That is why this file lives outside the ``web`` package, whose ``__init__`` imports the whole app:
it patches first, then takes the logging and metrics hooks from ``web/gunicorn_conf.py``."""

from gevent import monkey

monkey.patch_all()

from web.gunicorn_conf import child_exit, logconfig_dict, on_starting, post_worker_init  # noqa: E402, F401 - after the patching, on purpose

worker_class = "gevent"
worker_connections = 200
