"""``ledgerflow subscriptions list|show|create|disable|enable|delete|rotate|deliveries|redeliver``: event
subscriptions and their webhook deliveries from the shell (X-EVENT). Same rules as ``ops_cli``: a
credential token with ``integrations:manage`` (``--integration-access``), the API's own domain
functions in one short transaction each, the same audit rows, ``--json`` for scripts, a confirmation
before every change (``--yes`` skips it). A secret is printed by ``create`` and ``rotate`` only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from app.auth import Scope
from ledgerflow.ops_cli import (
    _confirm,
    _console,
    _emit_json,
    _kv,
    _read,
    _short,
    _table,
    _write,
    cli_request_id,
    operator_command,
)

MANAGE = Scope.INTEGRATIONS_MANAGE


@click.group("subscriptions")
def subscriptions() -> None:
    """Event subscriptions (signed webhooks) and their deliveries (needs --integration-access)."""


def _show(data: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        _emit_json(data)
        return
    _console().print(
        _kv(title, [(k, v if not isinstance(v, list) else ", ".join(v)) for k, v in data.items()])
    )


@subscriptions.command("list")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100))
@click.option("--cursor")
@operator_command(MANAGE)
def subs_list(principal: Any, as_json: bool, limit: int, cursor: str | None) -> None:
    """Subscriptions of the credential's namespace, oldest first."""
    from app.integrations import subscriptions as subs

    data = _read(lambda c: subs.list_page(c, principal.namespace_id, limit, cursor))
    if as_json:
        _emit_json(data)
        return
    rows = [
        (
            s["id"],
            "yes" if s["enabled"] else "NO",
            ",".join(s["event_types"]),
            _short(s["url"], 50),
            s["consecutive_failures"],
            _short(s["disabled_reason"] or "", 40),
        )
        for s in data["items"]
    ]
    _console().print(
        _table("subscriptions", ["id", "enabled", "events", "url", "failures", "disabled because"], rows)
    )
    if data.get("next_cursor"):
        _console().print(f"more: --cursor {data['next_cursor']}")


@subscriptions.command("show")
@click.argument("subscription_id")
@operator_command(MANAGE)
def subs_show(principal: Any, as_json: bool, subscription_id: str) -> None:
    """One subscription (never its secret)."""
    from app.integrations import subscriptions as subs

    _show(_read(lambda c: subs.get(c, principal.namespace_id, subscription_id)), as_json, "subscription")


@subscriptions.command("create")
@click.option("--url", required=True)
@click.option(
    "--event", "event_types", multiple=True, required=True, help="event type, family.* or * (repeatable)"
)
@click.option("--definition-id")
@click.option("--description", default="")
@operator_command(MANAGE)
def subs_create(
    principal: Any,
    as_json: bool,
    url: str,
    event_types: tuple[str, ...],
    definition_id: str | None,
    description: str,
) -> None:
    """Create a subscription; its signing secret is printed once."""
    from app.integrations import subscriptions as subs

    req = {
        "url": url,
        "event_types": list(event_types),
        "definition_id": definition_id,
        "description": description,
    }
    _show(_write(lambda c: subs.create(c, principal, cli_request_id(), req)), as_json, "subscription created")


def _toggle(enabled: bool) -> Any:
    verb = "enable" if enabled else "disable"

    @subscriptions.command(verb)
    @click.argument("subscription_id")
    @click.option("--reason", help="why (written to the audit)")
    @click.option("--yes", "-y", is_flag=True)
    @operator_command(MANAGE)
    def cmd(principal: Any, as_json: bool, subscription_id: str, reason: str | None, yes: bool) -> None:
        from app.integrations import subscriptions as subs

        _confirm(f"{verb} subscription {subscription_id}?", yes)
        data = _write(
            lambda c: subs.set_enabled(c, principal, cli_request_id(), subscription_id, enabled, reason)
        )
        _show(data, as_json, f"subscription {verb}d")

    cmd.__doc__ = f"{verb.capitalize()} a subscription" + (" (clears its failure count)." if enabled else ".")
    return cmd


subs_enable = _toggle(True)
subs_disable = _toggle(False)


@subscriptions.command("delete")
@click.argument("subscription_id")
@click.option("--yes", "-y", is_flag=True)
@operator_command(MANAGE)
def subs_delete(principal: Any, as_json: bool, subscription_id: str, yes: bool) -> None:
    """Delete a subscription (deliveries still queued are skipped)."""
    from app.integrations import subscriptions as subs

    _confirm(f"delete subscription {subscription_id}?", yes)
    _show(_write(lambda c: subs.delete(c, principal, cli_request_id(), subscription_id)), as_json, "deleted")


@subscriptions.command("rotate")
@click.argument("subscription_id")
@click.option("--grace-seconds", type=click.IntRange(0, 7 * 24 * 3600), default=None, help="default 86400")
@click.option("--yes", "-y", is_flag=True)
@operator_command(MANAGE)
def subs_rotate(
    principal: Any, as_json: bool, subscription_id: str, grace_seconds: int | None, yes: bool
) -> None:
    """Rotate the signing secret (printed once); the previous one keeps signing for the grace period."""
    from app.integrations import subscriptions as subs

    _confirm(f"rotate the secret of {subscription_id}?", yes)
    data = _write(lambda c: subs.rotate(c, principal, cli_request_id(), subscription_id, grace_seconds))
    _show(data, as_json, "secret rotated")


@subscriptions.command("deliveries")
@click.argument("subscription_id")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@click.option("--cursor")
@operator_command(MANAGE)
def subs_deliveries(
    principal: Any, as_json: bool, subscription_id: str, limit: int, cursor: str | None
) -> None:
    """The delivery log, newest first: event, status, attempts, response code, latency."""
    from app.integrations import subscriptions as subs

    data = _read(lambda c: subs.deliveries(c, principal.namespace_id, subscription_id, limit, cursor))
    if as_json:
        _emit_json(data)
        return
    rows = [
        (
            d["id"],
            d["event_type"],
            d["status"],
            d["attempts"],
            d["response_code"] or "",
            f"{d['latency_ms']} ms" if d["latency_ms"] is not None else "",
            _short(d["last_error"] or "", 50),
        )
        for d in data["items"]
    ]
    _console().print(
        _table("deliveries", ["id", "event", "status", "attempts", "code", "latency", "last error"], rows)
    )
    if data.get("next_cursor"):
        _console().print(f"more: --cursor {data['next_cursor']}")


@subscriptions.command("redeliver")
@click.argument("subscription_id")
@click.option("--delivery", "delivery_id", help="one delivery")
@click.option(
    "--since",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"]),
    help="every failed, dead, unknown or skipped delivery since this time (UTC if no offset)",
)
@click.option("--include-succeeded", is_flag=True, help="with --since: succeeded deliveries too")
@click.option("--rate", default=20, show_default=True, type=click.IntRange(1, 100), help="per second")
@click.option("--reason")
@click.option("--yes", "-y", is_flag=True)
@operator_command(MANAGE)
def subs_redeliver(
    principal: Any,
    as_json: bool,
    subscription_id: str,
    delivery_id: str | None,
    since: datetime | None,
    include_succeeded: bool,
    rate: int,
    reason: str | None,
    yes: bool,
) -> None:
    """Redeliver one delivery (--delivery) or everything since a time (--since), staggered."""
    from datetime import UTC

    from app.integrations import subscriptions as subs
    from app.ledger.job_actions import Actor

    actor = Actor(principal=principal, request_id=cli_request_id(), reason=reason)
    if delivery_id is not None and since is None:
        _confirm(f"redeliver {delivery_id}?", yes)
        data = _write(lambda c: subs.redeliver_one(c, actor, subscription_id, delivery_id))
    elif since is not None and delivery_id is None:
        when = since if since.tzinfo else since.replace(tzinfo=UTC)
        _confirm(f"redeliver the deliveries of {subscription_id} since {when.isoformat()}?", yes)
        data = _write(
            lambda c: subs.redeliver_since(
                c, actor, subscription_id, when, include_succeeded=include_succeeded, rate=rate
            )
        )
    else:
        raise click.UsageError("give exactly one of --delivery or --since")
    _show(data, as_json, "redelivery submitted")
