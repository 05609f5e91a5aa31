"""``ledgerflow credentials create|list|revoke`` (SPEC X-CRED, W-API-4, L-API-1)."""

from __future__ import annotations

import json

import click

from app.auth import SWITCHES
from ledgerflow.cli_common import BAD_INPUT, Failure
from ledgerflow.light_cli import CommandError, parse_duration

_HELP = {
    "workflow_access": "definitions:read + definitions:publish",
    "workflow_run_access": "workflows:read + workflows:start + tasks:submit",
    "workflow_control_access": "workflows:read + workflows:control (instance read, pause / resume / cancel)",
    "workflow_signal_access": "workflows:read + workflows:signal (instance read, send signals)",
    "workflow_recovery_access": "workflows:read + workflows:recovery (instance read, resolve NEEDS_REVIEW)",
    "workflow_audit_access": "workflows:audit:read (operation and signal audit)",
    "engine_monitor": "workflow:instance:monitor (job ledger reads and previews)",
    "engine_operate": "workflow:engine:operate (job ledger retry / skip / replay)",
    "task_worker": "tasks:work (claim and settle tasks; --queue restricts it)",
    "integration_access": "integrations:manage (event subscriptions, webhook deliveries, automation rules)",
    "credential_access": "credentials:manage (issue, list and revoke the namespace's credentials through the "
    "API, never with more rights than its own)",
}


@click.group()
def credentials() -> None:
    """Namespaces and bearer tokens (only a hash of each token is stored)."""


def _switches(fn):
    for name in reversed(list(SWITCHES)):
        fn = click.option(f"--{name.replace('_', '-')}", name, is_flag=True, help=_HELP[name])(fn)
    return fn


@credentials.command("create")
@click.option("--namespace", required=True, help="namespace name (created if missing)")
@click.option("--name", required=True, help="credential name, unique among live credentials of the namespace")
@_switches
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="QUEUE",
    help="restrict --task-worker to this queue (repeatable)",
)
@click.option(
    "--platform",
    is_flag=True,
    help="platform-wide operator: --engine-monitor / --engine-operate reach every namespace's jobs "
    "(without it they reach only this namespace's)",
)
@click.option(
    "--expires-in",
    "expires_in",
    default=None,
    metavar="DURATION",
    help="token lifetime, e.g. 3600, 90m, 12h, 30d",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--token-only", is_flag=True, help="print only the token (for TOKEN=$(...) in a shell)")
@click.option(
    "--replace",
    is_flag=True,
    help="revoke the live credential of that name first (audited), so running the command again "
    "gives a new token instead of an error",
)
def create(
    namespace: str,
    name: str,
    queues: tuple[str, ...],
    platform: bool,
    expires_in: str | None,
    as_json: bool,
    token_only: bool,
    replace: bool,
    **flags: bool,
) -> None:
    """Issue a credential with explicit permission switches; the token is printed once. Issuing is
    written to the namespace's operation audit."""
    from app.audit import issue_credential, revoke_credential
    from app.auth import list_credentials, scopes_from_switches, validate_permission_set
    from app.db import transaction
    from app.errors import InvalidArgument

    scopes = scopes_from_switches(**flags)
    try:
        seconds = None if expires_in is None else parse_duration(expires_in)
        # before anything is written
        validate_permission_set(scopes, list(queues) if queues else None, platform=platform)
        with transaction() as conn:
            if replace:  # in the same transaction: a failed issue keeps the old credential
                for old in list_credentials(conn, namespace):
                    if old["name"] == name and old["revoked_at"] is None:
                        revoke_credential(conn, old["id"], actor_name=_actor())
            issued = issue_credential(
                conn,
                actor_name=_actor(),
                namespace=namespace,
                name=name,
                scopes=scopes,
                queues=list(queues) if queues else None,
                platform=platform,
                expires_in_seconds=seconds,
            )
    except CommandError as exc:  # a bad --expires-in (ledgerflow.light_cli.parse_duration)
        raise Failure(exc.message, exit_code=exc.exit_code) from None
    except InvalidArgument as exc:
        if "already exists" in exc.message:  # a conflict with what is there, not a bad argument
            raise Failure(f"{exc.message} (or add --replace to revoke it and issue a new token)") from None
        raise Failure(exc.message, exit_code=BAD_INPUT) from None
    if token_only:
        click.echo(issued.token)
        return
    doc = {
        "token": issued.token,
        "credential_id": issued.credential_id,
        "name": issued.name,
        "namespace": issued.namespace,
        "namespace_id": issued.namespace_id,
        "scopes": list(issued.scopes),
        "queues": None if issued.queues is None else list(issued.queues),
        "created_at": issued.created_at.isoformat(),
        "platform": issued.platform,
        "expires_at": None if issued.expires_at is None else issued.expires_at.isoformat(),
    }
    if as_json:
        click.echo(json.dumps(doc))
        return
    click.echo(
        f"credential {issued.credential_id} ({issued.name}) in namespace {issued.namespace} "
        f"[{issued.namespace_id}]"
    )
    click.echo(
        f"scopes: {', '.join(issued.scopes)}" + ("  [PLATFORM-WIDE operator]" if issued.platform else "")
    )
    if issued.expires_at is not None:
        click.echo(f"expires: {issued.expires_at.isoformat()}")
    if issued.queues is not None:
        click.echo(f"queues: {', '.join(issued.queues)}")
    click.echo("token (shown once, store it now):")
    click.echo(issued.token)


@credentials.command("list")
@click.option("--namespace", default=None, help="only this namespace")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(namespace: str | None, as_json: bool) -> None:
    """List credentials (never the tokens; a prefix identifies each)."""
    from app.auth import list_credentials
    from app.db import get_engine

    with get_engine().connect() as conn:
        rows = list_credentials(conn, namespace)
    if as_json:
        click.echo(json.dumps(rows, default=str))
        return
    for r in rows:
        state = f"revoked {r['revoked_at']:%Y-%m-%d %H:%M}" if r["revoked_at"] else "live"
        queues = f" queues={','.join(r['queues'])}" if r["queues"] else ""
        reach = "  PLATFORM-WIDE" if r["platform"] else ""
        expiry = f"  expires {r['expires_at']:%Y-%m-%d %H:%M}" if r["expires_at"] else ""
        click.echo(
            f"{r['id']}  {r['namespace']}/{r['name']}  {r['token_prefix']}…  {state}  "
            f"{','.join(r['scopes'])}{queues}{reach}{expiry}"
        )


@credentials.command("revoke")
@click.argument("credential_id")
def revoke(credential_id: str) -> None:
    """Revoke a credential by id; requests with its token answer 401 from now on (audited)."""
    from app.audit import revoke_credential
    from app.db import transaction
    from app.errors import NotFound

    try:
        with transaction() as conn:
            row = revoke_credential(conn, credential_id, actor_name=_actor())
    except NotFound as exc:
        raise Failure(exc.message) from None
    click.echo(f"revoked {row['id']} ({row['name']}) at {row['revoked_at'].isoformat()}")


def _actor() -> str:
    """Who ran the CLI, for the audit (the operating-system user)."""
    import getpass

    try:
        return "cli:" + getpass.getuser()
    except (KeyError, OSError):
        return "cli"
