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
from collections.abc import Sequence
from typing import Any

import click

from ledgerflow.cli_common import BAD_INPUT, Failure, expected_failure, one_line

# The job types of the ledger (L-TYPE) and what each does. They are the engine's own work: user code runs
# in task workers (ledgerflow.client.TaskWorker), not in ledger handlers. Every type has a built-in
# handler (actors.handler_modules); tests/docs checks this table, the pools and the docs against the code.
JOB_TYPES: dict[str, str] = {
    "delay_wake": "timers, retry backoffs, poll rounds, signal waits",
    "task_timeout": "an instance's watch: its deadline and its open tasks' deadlines",
    "subprocess_spawn": "starts a SUBWORKFLOW child",
    "subprocess_join": "completes a SUBWORKFLOW step",
    "schedule_launch": "one fire of a schedule",
    "trigger_dispatch": "the outbound call of a TRIGGER step",
    "external_dispatch": "sends a TASK step's task to an external system",
    "event_dispatch": "fans workflow events out to subscriptions and automation rules",
    "webhook_delivery": "one signed webhook delivery",
    "compensation_action": "issues a compensation task (saga)",
    "automation_action": "one action of an automation rule",
}


def job_type_lines() -> list[str]:
    """``TYPE  pool: what it does`` for each job type (``enqueue --help``)."""
    from app.ledger.states import POOL_OF_TYPE, JobType

    return [f"  {t:<20} {POOL_OF_TYPE[JobType(t)].value}: {d}" for t, d in JOB_TYPES.items()]


def _setup_logging() -> None:
    from app.observability.logs import setup_logging  # JSON lines unless a terminal / LOG_FORMAT

    setup_logging()
    for noisy in ("dramatiq", "pgserver", "alembic", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class LedgerflowGroup(click.Group):
    """Turns expected errors of any subcommand (nested groups included) into one line, and usage errors
    too: ``Error: <message> (see `ledgerflow ... --help`)`` instead of click's usage block."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            click.echo(f"Error: {one_line(exc)}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context):
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
    """Database schema: apply the migrations (the Procfile's release phase), recount the quota counters
    (when `ledgerflow doctor` says so)."""


@db.command("upgrade")
@click.option("--revision", default="heads", show_default=True)
def db_upgrade(revision: str) -> None:
    """Apply Alembic migrations to DATABASE_URL (the Procfile's release phase). Safe on every deploy
    and concurrently: a database at the head is left as it is, and a second upgrade running at the
    same time waits for the first (an advisory lock), then finds nothing to do."""
    from app.migrate import current_revisions, head_revisions, upgrade
    from app.settings import get_settings

    url = get_settings().database_url
    before = current_revisions(url)
    upgrade(url, revision)
    after = current_revisions(url)
    at = ", ".join(after) or "(empty)"
    head = " (head)" if set(after) == set(head_revisions(url)) else ""
    if before == after:
        click.echo(f"database schema already at {at}{head}: nothing to do")
    else:
        click.echo(f"database schema upgraded: {', '.join(before) or '(empty)'} -> {at}{head}")
    if head:
        _settle_history()


def _settle_history() -> None:
    """The history tables' partitions settled right after the migrations (``settle_history``), so that
    an upgrade does not wait for the drain: a table still busy is left to the drain, and said."""
    from app.db import transaction
    from app.engine.retention import HISTORY, settle_history

    pending = []
    for spec in HISTORY:
        with transaction() as conn:
            if not settle_history(conn, spec):
                pending.append(spec.table)
    if pending:
        click.echo(
            f"history partitions: {', '.join(pending)} still has the partition of before the upgrade "
            "(a lock was not had); the drain settles it"
        )
    else:
        click.echo("history partitions: settled, created a week ahead")


@db.command("repair-quota-counts")
def db_repair_quota_counts() -> None:
    """Recount the quota counters from the instances (when `ledgerflow doctor` says they differ).
    Holds writers of the instance table for the recount."""
    from app.db import transaction
    from app.engine.quotas import repair as repair_quota_counts

    with transaction() as conn:
        n = repair_quota_counts(conn)
    click.echo(f"quota counters recounted for {n} namespace(s)")


@main.command()
@click.option("--pool", type=click.Choice(["advance", "outbound"]), required=True)
def worker(pool: str) -> None:
    """Run one ledger worker pool (4 slots) until SIGTERM/SIGINT (then it stops claiming, lets running
    jobs finish for the shutdown grace and hands back the rest)."""
    from actors.runtime import run_worker

    run_worker(pool)


@main.command()
def scheduler() -> None:
    """Start the drain every minute (inline when Redis is down) and hand due schedules their launches,
    until SIGTERM (it exits between ticks)."""
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
    "Ledger jobs are the engine's own work (timers, timeouts, child workflows, schedules, outbound\n"
    "calls, events, compensation); your workflow code runs in task workers\n"
    "(ledgerflow.client.TaskWorker) instead. Every type has a built-in handler; a module named in\n"
    "LEDGERFLOW_HANDLERS may replace one for its type (examples/hello.py does, for automation_action).\n\n"
    "\b\nTYPE is one of (pool: what it does):\n" + "\n".join(job_type_lines())
)


@main.command(help=_ENQUEUE_HELP, short_help="Enqueue one ledger job (--help lists the job types).")
@click.argument("job_type", metavar="TYPE")
@click.option("--payload", default="{}", show_default=True, help="a JSON object")
@click.option("--delay-ms", default=0.0, type=float, help="run no earlier than this many ms from now")
@click.option(
    "--priority",
    default=0,
    show_default=True,
    type=click.IntRange(-32768, 32767),
    help="the SMALLER number runs first (e.g. -10 before 0 before 10); every fourth claim takes the "
    "earliest due job whatever its priority",
)
@click.option(
    "--idempotency-key", default=None, help="a second enqueue with the same key returns the first job"
)
def enqueue(job_type: str, payload: str, delay_ms: float, priority: int, idempotency_key: str | None) -> None:
    if job_type not in JOB_TYPES:
        raise Failure(
            f"unknown job type {job_type!r}; valid types: {', '.join(JOB_TYPES)}", exit_code=BAD_INPUT
        )
    try:
        body = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise Failure(
            f'--payload is not JSON ({exc}); give a JSON object, e.g. \'{{"name": "x"}}\'', BAD_INPUT
        ) from None
    if not isinstance(body, dict):
        raise Failure(
            f'--payload must be a JSON object, not {type(body).__name__}; e.g. \'{{"name": "x"}}\'', BAD_INPUT
        )
    if delay_ms < 0:
        raise Failure("--delay-ms must be 0 or more", exit_code=BAD_INPUT)
    from actors import hints
    from app.db import transaction
    from app.ledger.enqueue import enqueue as do_enqueue

    hints.install_publisher()
    with transaction() as conn:
        job = do_enqueue(
            conn, job_type, body, delay_ms=delay_ms, priority=priority, idempotency_key=idempotency_key
        )
    click.echo(json.dumps({"id": job.id, "created": job.created}))


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
    """What `make run` runs: services, migrations, then every long-running Procfile process until
    Ctrl-C or SIGTERM (which give each process 25 s to stop, as on Heroku)."""
    from app.migrate import upgrade
    from app.settings import BIND_HOST, PORT, SECRET_KEY, get_settings
    from ledgerflow import procfile
    from ledgerflow.client import server_url
    from ledgerflow.devenv import ROOT, data_dir, ensure_environment, session_key

    os.environ["PORT"] = str(port or PORT.get())
    if host:
        os.environ["LEDGERFLOW_BIND_HOST"] = host
    # `make run` serves this machine only; the Procfile binds every interface for Heroku-style hosts
    # (set LEDGERFLOW_BIND_HOST=0.0.0.0 to share a dev server deliberately)
    os.environ.setdefault("LEDGERFLOW_BIND_HOST", "127.0.0.1")
    bound, web_port = BIND_HOST.get(), PORT.get()
    _refuse_port_in_use(bound, web_port)  # before anything starts (a second `make run`)
    ensure_environment()
    # shared PROMETHEUS_MULTIPROC_DIR under this server's own data folder (LEDGERFLOW_DATA_DIR), console logs
    ops_cli.dev_environment(data_dir())
    SECRET_KEY.provide(session_key)  # one console session key for every web worker, kept across restarts
    if ensure_database(get_settings().database_url):
        click.echo("[ledgerflow] the database DATABASE_URL names did not exist: created it")
    upgrade(get_settings().database_url)
    _settle_history()
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
    sys.stdout.flush()
    sys.stderr.flush()
    _die_with_parent()
    # honcho starts each process in its own process group; SIGTERM / SIGINT reach this process, which
    # sends SIGTERM to every group (gunicorn and its workers included) and SIGKILL 25 s later
    raise SystemExit(procfile.run(ROOT / "Procfile", ROOT, int(web_port)))


def ensure_database(url: str) -> bool:
    """Create the database ``url`` names when it does not exist and the server lets this role (``CREATE
    DATABASE`` on the server's maintenance database, ``postgres``); True when it was created. When the
    role may not, a Failure says the one command to run. Any other connection problem is raised as it
    was (the caller's one-line error)."""
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    target = make_url(url).set(drivername="postgresql")
    try:
        psycopg.connect(target.render_as_string(hide_password=False), connect_timeout=10).close()
        return False
    except psycopg.OperationalError as exc:
        missing = exc  # the database may be missing (libpq gives no SQLSTATE for it): ask the server
    name = target.database or ""
    maintenance = target.set(database="postgres")
    try:
        with psycopg.connect(
            maintenance.render_as_string(hide_password=False), autocommit=True, connect_timeout=10
        ) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                raise missing  # it exists: the first error was something else
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.errors.DuplicateDatabase:
                return False  # created meanwhile (a second `make run`)
            except psycopg.Error as exc:
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise Failure(
                    f"the database {name!r} does not exist and this role cannot create it ({reason}); "
                    "create it with a role that may, then run this again: "
                    f"psql '{maintenance.render_as_string(hide_password=True)}' -c 'CREATE DATABASE \"{name}\"'"
                ) from None
    except psycopg.OperationalError:
        raise missing from None  # the server itself cannot be reached: the first error says so
    return True


def _refuse_port_in_use(host: str, port: int) -> None:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        try:
            s.bind((host, port))
        except OSError as exc:
            raise Failure(
                f"{host}:{port} is already in use ({exc.strerror}): is `make run` already running? Stop it "
                "(Ctrl-C in its shell) or choose another port: PORT=5001 make run"
            ) from None


@main.command("services-stop")
def services_stop() -> None:
    """Stop the embedded PostgreSQL and Redis (their data stays under .data/)."""
    from ledgerflow.devenv import stop_embedded

    stop_embedded()


from ledgerflow import ops_cli, subscriptions_cli, workflow_ops_cli, workflows_cli  # noqa: E402, F401
from ledgerflow.credentials_cli import credentials  # noqa: E402
from ledgerflow.doctor import doctor  # noqa: E402
from ledgerflow.schedules_cli import schedules  # noqa: E402

main.add_command(credentials)
for _command in (
    workflows_cli.definitions,
    ops_cli.jobs,
    ops_cli.workflows,
    schedules,
    subscriptions_cli.subscriptions,
    doctor,
):
    main.add_command(_command)
workflows_cli.start_command(
    ops_cli.workflows
)  # through the API, as the SDK: the first workflow from the shell
workflows_cli.watch_command(ops_cli.workflows)

if __name__ == "__main__":
    main()
