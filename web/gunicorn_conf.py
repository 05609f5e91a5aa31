"""gunicorn hooks of the ``web`` process, loaded by ``gunicorn.conf.py`` (the serving model, gevent,
is set there): its own logs in the same JSON / console format as every other process (the app logs
one access line per request itself, with the request id), the Prometheus multiprocess clean-up
of exited workers, and each worker's start-up heap frozen once its app is loaded (``app.process``)."""

from app import settings
from app.observability import logs, metrics
from app.process import settle_startup_heap

settings.exit_on_bad_settings()  # in the master, before it binds: one line naming the variable, exit 2
logconfig_dict = logs.gunicorn_logconfig()


def post_worker_init(worker):  # noqa: ANN001, ANN201 - gunicorn's hook signature
    settle_startup_heap()  # the app is loaded: its objects leave the collector's full scans


def child_exit(server, worker):  # noqa: ANN001, ANN201 - gunicorn's hook signature
    metrics.mark_process_dead(worker.pid)
