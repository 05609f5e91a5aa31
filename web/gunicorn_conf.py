"""gunicorn hooks of the ``web`` process, loaded by ``gunicorn.conf.py`` (the serving model, gevent,
is set there): its own logs in the same JSON / console format as every other process (the app logs
one access line per request itself, with the request id), the Prometheus multiprocess clean-up
of exited workers, and each worker's start-up heap frozen once its app is loaded (``app.process``)."""

import os
import secrets
import sys

from app import settings
from app.observability import logs, metrics
from app.process import settle_startup_heap

settings.exit_on_bad_settings()  # in the master, before it binds: one line naming the variable, exit 2
logconfig_dict = logs.gunicorn_logconfig()


def on_starting(server):  # noqa: ANN001, ANN201 - gunicorn's hook signature
    """In the master, before any worker: production refuses to start on a missing key, one line per
    problem and no traceback; in development without ``LEDGERFLOW_SECRET_KEY`` the master makes one
    that every worker inherits, so a console session made by one worker is valid in the other
    (`ledgerflow dev` passes one kept under .data/, which also survives restarts)."""
    problems = settings.production_problems()
    if problems:
        sys.stderr.write("".join(f"ledgerflow: refusing to start (LEDGERFLOW_ENV=production): {p}\n"
                                 for p in problems))  # fmt: skip
        raise SystemExit(1)  # in the master, before any worker exists
    if not settings.is_production() and not settings.SECRET_KEY.is_set():
        os.environ[settings.SECRET_KEY.name] = secrets.token_urlsafe(48)  # inherited by the forked workers


def post_worker_init(worker):  # noqa: ANN001, ANN201 - gunicorn's hook signature
    settle_startup_heap()  # the app is loaded: its objects leave the collector's full scans


def child_exit(server, worker):  # noqa: ANN001, ANN201 - gunicorn's hook signature
    metrics.mark_process_dead(worker.pid)
