"""``ledgerflow credentials create|list|revoke`` (SPEC X-CRED, W-API-4, L-API-1)."""

from __future__ import annotations

import json

import click

from app.auth import SWITCHES
from ledgerflow.cli_common import Failure

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
}


@click.group()
def credentials() -> None:
    """Namespaces and bearer tokens (only a hash of each token is stored)."""


def _switches(fn):  # noqa: ANN001, ANN202
    for name in reversed(list(SWITCHES)):
        fn = click.option(f"--{name.replace('_', '-')}", name, is_flag=True, help=_HELP[name])(fn)
    return fn


@credentials.command("create")
@click.option("--namespace", required=True, help="namespace name (created if missing)")
@click.option("--name", required=True, help="credential name, unique among live credentials of the namespace")
@_switches
@click.option("--queue", "queues", multiple=True, help="restrict --task-worker to this queue (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--token-only", is_flag=True, help="print only the token (for TOKEN=$(...) in a shell)")
def create(
    namespace: str, name: str, queues: tuple[str, ...], as_json: bool, token_only: bool, **flags: bool
) -> None:
    """Issue a credential with explicit permission switches; the token is printed once."""
    from app.auth import create_credential, scopes_from_switches, validate_permission_set
    from app.db import transaction
    from app.errors import InvalidArgument

    scopes = scopes_from_switches(**flags)
    try:
        validate_permission_set(scopes, list(queues) if queues else None)  # before anything is written
        with transaction() as conn:
            issued = create_credential(
                conn, namespace=namespace, name=name, scopes=scopes, queues=list(queues) if queues else None
            )
    except InvalidArgument as exc:
        raise Failure(exc.message, exit_code=2) from None
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
    }
    if as_json:
        click.echo(json.dumps(doc))
        return
    click.echo(
        f"credential {issued.credential_id} ({issued.name}) in namespace {issued.namespace} "
        f"[{issued.namespace_id}]"
    )
    click.echo(f"scopes: {', '.join(issued.scopes)}")
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
        click.echo(
            f"{r['id']}  {r['namespace']}/{r['name']}  {r['token_prefix']}…  {state}  "
            f"{','.join(r['scopes'])}{queues}"
        )


@credentials.command("revoke")
@click.argument("credential_id")
def revoke(credential_id: str) -> None:
    """Revoke a credential by id; requests with its token answer 401 from now on."""
    from app.auth import revoke_credential
    from app.db import transaction
    from app.errors import NotFound

    try:
        with transaction() as conn:
            row = revoke_credential(conn, credential_id)
    except NotFound as exc:
        raise Failure(exc.message, exit_code=2) from None
    click.echo(f"revoked {row['id']} ({row['name']}) at {row['revoked_at'].isoformat()}")
