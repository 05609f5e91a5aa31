"""The ``ledgerflow`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click


def _setup_logging() -> None:
    from app.observability.logs import setup_logging  # JSON lines unless a terminal / LOG_FORMAT

    setup_logging()


@click.group()
def main() -> None:
    """Ledgerflow: a durable workflow engine on a PostgreSQL job ledger."""
    _setup_logging()


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.option("--revision", default="heads", show_default=True)
def db_upgrade(revision: str) -> None:
    """Apply Alembic migrations to DATABASE_URL."""
    from app.config import get_settings
    from app.migrate import upgrade

    upgrade(get_settings().database_url, revision)
    click.echo(f"database upgraded to {revision}")


@main.command()
@click.option("--pool", type=click.Choice(["advance", "outbound"]), required=True)
def worker(pool: str) -> None:
    """Run one worker pool (4 slots) until SIGTERM/SIGINT."""
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


@main.command()
@click.argument("job_type")
@click.option("--payload", default="{}", help="JSON payload")
@click.option("--delay-ms", default=0.0, type=float)
@click.option("--priority", default=0, type=int)
@click.option("--idempotency-key", default=None)
def enqueue(job_type: str, payload: str, delay_ms: float, priority: int, idempotency_key: str | None) -> None:
    """Enqueue one job (the same as ``app.ledger.enqueue.enqueue`` from Python)."""
    from actors import hints
    from app.db import transaction
    from app.ledger.enqueue import enqueue as do_enqueue

    hints.install_publisher()
    try:
        body = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"--payload is not JSON: {exc}") from None
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
    os.execvp(command[0], list(command))


@main.command()
@click.option("--port", default=None, type=int, help="web port (default $PORT or 5000)")
def dev(port: int | None) -> None:
    """What `make run` runs: services, migrations, then all Procfile processes until Ctrl-C."""
    from ledgerflow.devenv import ROOT, ensure_environment

    ensure_environment()
    ops_cli.dev_environment(ROOT / ".data")  # shared PROMETHEUS_MULTIPROC_DIR, console logs in a terminal
    os.environ.setdefault("PORT", str(port or os.environ.get("PORT") or 5000))
    if port:
        os.environ["PORT"] = str(port)
    # `make run` serves this machine only; the Procfile binds every interface for Heroku-style hosts
    # (set LEDGERFLOW_BIND_HOST=0.0.0.0 to share a dev server deliberately)
    os.environ.setdefault("LEDGERFLOW_BIND_HOST", "127.0.0.1")
    from app.config import get_settings
    from app.migrate import upgrade

    upgrade(get_settings().database_url)
    click.echo(f"[ledgerflow] database migrated; web server on http://127.0.0.1:{os.environ['PORT']}")
    click.echo("[ledgerflow] Ctrl-C stops all processes")
    bin_dir = os.path.dirname(sys.executable)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    proc = subprocess.run(
        [os.path.join(bin_dir, "honcho"), "-f", str(ROOT / "Procfile"), "-d", str(ROOT), "start"], check=False
    )
    sys.exit(proc.returncode)


@main.command("services-stop")
def services_stop() -> None:
    """Stop the embedded PostgreSQL and Redis (their data stays under .data/)."""
    from ledgerflow.devenv import stop_embedded

    stop_embedded()


from ledgerflow import ops_cli  # noqa: E402
from ledgerflow.credentials_cli import credentials  # noqa: E402
from ledgerflow.doctor import doctor  # noqa: E402

main.add_command(credentials)
for _command in (ops_cli.jobs, ops_cli.workflows, doctor):
    main.add_command(_command)

if __name__ == "__main__":
    main()
