"""The ``ledgerflow`` command.

With DATABASE_URL / REDIS_URL unset every command uses the embedded services under ``.data/``
(found when running, started when not), so nothing needs a prefix. Expected errors are one line
(``Error: ...``) and a non-zero exit, never a traceback. A command group from another module is
registered with one ``main.add_command(...)`` line at the end of this file.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import click

from ledgerflow.cli_common import Failure, expected_failure

# The job types of the ledger (L-TYPE). They are the engine's own work: user code runs in task
# workers (ledgerflow.client.TaskWorker), not in ledger handlers.
JOB_TYPES: dict[str, str] = {
    "delay_wake": "advance: timers, retry backoffs, signal waits, deadlines (built in)",
    "task_timeout": "advance: a task that ran past its timeout (built in)",
    "subprocess_spawn": "advance: starts a SUBWORKFLOW child (built in)",
    "subprocess_join": "advance: completes a SUBWORKFLOW step (built in)",
    "schedule_launch": "advance: a scheduled launch (needs a handler module)",
    "trigger_dispatch": "outbound: a trigger call (needs a handler module)",
    "external_dispatch": "outbound: an external call (needs a handler module)",
    "event_dispatch": "outbound: an event delivery (needs a handler module)",
    "webhook_delivery": "outbound: a webhook delivery (needs a handler module)",
    "compensation_action": "outbound: issues a compensation task (built in)",
    "automation_action": "outbound: an automation step (needs a handler module)",
}
BUILTIN_HANDLERS = {t for t, d in JOB_TYPES.items() if d.endswith("(built in)")}


def _setup_logging() -> None:
    from app.observability.logs import setup_logging  # JSON lines unless a terminal / LOG_FORMAT

    setup_logging()
    for noisy in ("dramatiq", "pgserver", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class LedgerflowGroup(click.Group):
    """Turns expected errors of any subcommand (nested groups included) into one line."""

    def invoke(self, ctx: click.Context):  # noqa: ANN201
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            failure = expected_failure(exc)
            if failure is None:
                raise
            raise failure from None


@click.group(cls=LedgerflowGroup)
@click.version_option(package_name="ledgerflow", prog_name="ledgerflow")
def main() -> None:
    """Ledgerflow: a durable workflow engine on a PostgreSQL job ledger.

    With DATABASE_URL / REDIS_URL unset, commands use the embedded PostgreSQL and Redis under
    .data/ (started when needed; `ledgerflow services-stop` stops them).
    """
    from app import settings
    from ledgerflow.devenv import discover_environment

    settings.validate()  # a bad value is one line naming the variable, before anything starts
    _setup_logging()
    settings.on_missing_environment(discover_environment)


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.option("--revision", default="heads", show_default=True)
def db_upgrade(revision: str) -> None:
    """Apply Alembic migrations to DATABASE_URL."""
    from app.migrate import upgrade
    from app.settings import get_settings

    upgrade(get_settings().database_url, revision)
    click.echo(f"database upgraded to {revision}")


@db.command("repair-quota-counts")
def db_repair_quota_counts() -> None:
    """Recount the quota counters from the instances and tasks (when `ledgerflow doctor` says they
    differ). Holds writers of those two tables for the recount."""
    from app.db import transaction
    from app.engine.quotas import repair as repair_quota_counts

    with transaction() as conn:
        n = repair_quota_counts(conn)
    click.echo(f"quota counters recounted for {n} namespace(s)")


@main.command()
@click.option("--pool", type=click.Choice(["advance", "outbound"]), required=True)
def worker(pool: str) -> None:
    """Run one ledger worker pool (4 slots) until SIGTERM/SIGINT."""
    from actors.runtime import run_worker

    run_worker(pool)


@main.command()
def scheduler() -> None:
    """Enqueue the drain actor every minute (runs it inline when Redis is down)."""
    from actors.runtime import run_scheduler

    run_scheduler()


@main.command()
def drain() -> None:
    """Run the drain once and print what it reclaimed."""
    from actors import hints
    from actors.maintenance import run_drain

    hints.install_publisher()
    report = run_drain()
    click.echo(
        json.dumps(
            {
                "ran": report.ran,
                "reclaimed": report.reclaimed,
                "hinted": report.hinted_queues,
                "swept": report.swept,
            },
            default=str,
        )
    )


_ENQUEUE_HELP = (
    "Enqueue one ledger job of TYPE (the same as app.ledger.enqueue.enqueue from Python).\n\n"
    "Ledger jobs are the engine's own work (timers, timeouts, child workflows, compensation) and\n"
    "your handler modules' (LEDGERFLOW_HANDLERS); your workflow code runs in task workers\n"
    "(ledgerflow.client.TaskWorker) instead. A type whose handler no worker loaded ends dead\n"
    "with HANDLER_MISSING.\n\n"
    "\b\nTYPE is one of:\n" + "\n".join(f"  {t:<20} {d}" for t, d in JOB_TYPES.items())
)


@main.command(help=_ENQUEUE_HELP, short_help="Enqueue one ledger job (--help lists the job types).")
@click.argument("job_type", metavar="TYPE")
@click.option("--payload", default="{}", show_default=True, help="a JSON object")
@click.option("--delay-ms", default=0.0, type=float, help="run no earlier than this many ms from now")
@click.option("--priority", default=0, type=click.IntRange(-32768, 32767), help="higher runs first")
@click.option(
    "--idempotency-key", default=None, help="a second enqueue with the same key returns the first job"
)
def enqueue(job_type: str, payload: str, delay_ms: float, priority: int, idempotency_key: str | None) -> None:
    if job_type not in JOB_TYPES:
        raise Failure(f"unknown job type {job_type!r}; valid types: {', '.join(JOB_TYPES)}", exit_code=2)
    try:
        body = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise Failure(
            f'--payload is not JSON ({exc}); give a JSON object, e.g. \'{{"name": "x"}}\'', 2
        ) from None
    if not isinstance(body, dict):
        raise Failure(
            f'--payload must be a JSON object, not {type(body).__name__}; e.g. \'{{"name": "x"}}\'', 2
        )
    if delay_ms < 0:
        raise Failure("--delay-ms must be 0 or more", exit_code=2)
    from actors import hints
    from app.db import transaction
    from app.ledger.enqueue import enqueue as do_enqueue

    hints.install_publisher()
    with transaction() as conn:
        job = do_enqueue(
            conn, job_type, body, delay_ms=delay_ms, priority=priority, idempotency_key=idempotency_key
        )
    click.echo(json.dumps({"id": job.id, "created": job.created}))
    if job_type not in BUILTIN_HANDLERS:
        click.echo(
            f"note: {job_type} has no built-in handler; a worker must load one (LEDGERFLOW_HANDLERS), "
            "else the job ends dead with HANDLER_MISSING",
            err=True,
        )


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def env(command: tuple[str, ...]) -> None:
    """Run COMMAND with DATABASE_URL / REDIS_URL set (embedded services when they are unset)."""
    from ledgerflow.devenv import ensure_environment

    ensure_environment()
    try:
        os.execvp(command[0], list(command))
    except OSError as exc:
        raise Failure(f"cannot run {command[0]!r}: {exc.strerror}", exit_code=127) from None


def _die_with_parent() -> None:
    """Linux: the process gets SIGTERM when its parent (e.g. `make`) dies, so stopping `make run`
    in any way also stops everything it started. Kept across exec; a no-op elsewhere."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
    except (OSError, AttributeError):
        pass


@main.command()
@click.option("--port", default=None, type=int, help="web port (default $PORT or 5000)")
@click.option(
    "--host", default=None, help="address the web server binds (default $LEDGERFLOW_BIND_HOST or 127.0.0.1)"
)
def dev(port: int | None, host: str | None) -> None:
    """What `make run` runs: services, migrations, then all Procfile processes until Ctrl-C or SIGTERM."""
    from app.migrate import upgrade
    from app.settings import BIND_HOST, PORT, SECRET_KEY, get_settings
    from ledgerflow.client import server_url
    from ledgerflow.devenv import ROOT, ensure_environment, session_key

    ensure_environment()
    ops_cli.dev_environment(ROOT / ".data")  # shared PROMETHEUS_MULTIPROC_DIR, console logs in a terminal
    if not SECRET_KEY.is_set():  # one console session key for every web worker, kept across restarts
        os.environ[SECRET_KEY.name] = session_key()
    os.environ["PORT"] = str(port or PORT.get())
    if host:
        os.environ["LEDGERFLOW_BIND_HOST"] = host
    # `make run` serves this machine only; the Procfile binds every interface for Heroku-style hosts
    # (set LEDGERFLOW_BIND_HOST=0.0.0.0 to share a dev server deliberately)
    os.environ.setdefault("LEDGERFLOW_BIND_HOST", "127.0.0.1")
    upgrade(get_settings().database_url)
    bound, web_port = BIND_HOST.get(), PORT.get()
    if bound in ("0.0.0.0", "::"):
        where = f"all interfaces ({bound}), port {web_port}: http://127.0.0.1:{web_port}"
    else:
        where = f"http://{bound}:{web_port}"
    click.echo(f"[ledgerflow] database migrated; web server on {where}")
    url = server_url()
    if url != f"http://127.0.0.1:{web_port}":
        click.echo(f"[ledgerflow] SDK scripts use LEDGERFLOW_URL ({url}); export LEDGERFLOW_URL to match")
    click.echo("[ledgerflow] Ctrl-C (or SIGTERM) stops all processes")
    bin_dir = os.path.dirname(sys.executable)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    honcho = os.path.join(bin_dir, "honcho")
    sys.stdout.flush()
    sys.stderr.flush()
    _die_with_parent()
    # honcho replaces this process: SIGTERM / SIGINT reach it directly and it stops every process
    # group it started (gunicorn and its workers included), so the port is free afterwards.
    os.execv(honcho, [honcho, "-f", str(ROOT / "Procfile"), "-d", str(ROOT), "start"])


@main.command("services-stop")
def services_stop() -> None:
    """Stop the embedded PostgreSQL and Redis (their data stays under .data/)."""
    from ledgerflow.devenv import stop_embedded

    stop_embedded()


from ledgerflow import ops_cli, subscriptions_cli  # noqa: E402
from ledgerflow.credentials_cli import credentials  # noqa: E402
from ledgerflow.doctor import doctor  # noqa: E402
from ledgerflow.schedules_cli import schedules  # noqa: E402

main.add_command(credentials)
for _command in (ops_cli.jobs, ops_cli.workflows, schedules, subscriptions_cli.subscriptions, doctor):
    main.add_command(_command)

if __name__ == "__main__":
    main()
