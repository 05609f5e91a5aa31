"""gunicorn hooks of the ``web`` process, loaded by ``gunicorn.conf.py`` (the serving model, gevent,
is set there): its own logs in the same JSON / console format as every other process (the app logs
one access line per request itself, with the request id), and the Prometheus multiprocess clean-up
of exited workers."""

from app.observability import logs, metrics

logconfig_dict = logs.gunicorn_logconfig()


def child_exit(server, worker):  # noqa: ANN001, ANN201 - gunicorn's hook signature
    metrics.mark_process_dead(worker.pid)
