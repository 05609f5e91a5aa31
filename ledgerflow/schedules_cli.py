"""``ledgerflow schedules ...``: schedules (X-SCHED) from the shell, with the API's rules, schemas and
audit (token in ``LEDGERFLOW_TOKEN``; ``--json`` for scripts)."""

from __future__ import annotations

import json
from typing import Any

import click

from app.auth import Scope
from ledgerflow.ops_cli import (
    CliFailure,
    _console,
    _emit_json,
    _kv,
    _read,
    _table,
    _write,
    cli_request_id,
    operator_command,
)

READ = Scope.WORKFLOWS_READ
WRITE = Scope.WORKFLOWS_START


@click.group("schedules")
def schedules() -> None:
    """Schedules: list, show, fires, create, update, pause / resume, launch (now), delete."""


def _show(data: Any, as_json: bool) -> None:
    if as_json:
        _emit_json(data)
        return
    s = data.get("schedule", data)
    rule = s.get("cron") and f"cron {s['cron']} ({s['timezone']})" or f"every {s.get('interval_seconds')} s"
    pairs = [
        ("id", s["id"]),
        ("name", s["name"]),
        ("definition", f"{s['definition_id']} @ {s['version']}"),
        ("rule", rule),
        ("overlap", s["overlap"]),
        ("paused", s["paused"]),
        ("next fire times", ", ".join(s["next_fire_times"])),
    ]
    if "last_fire" in s:
        f = s["last_fire"]
        pairs.append(("last fire", f"{f['fire_at']} {f['status']} (+{f['skipped_missed']} missed coalesced)"))
    if data.get("missed"):
        pairs.append(("missed while paused", f"{data['missed']['fire_times']} -> one launch"))
    _console().print(_kv("schedule", pairs))


def _json_arg(value: str | None, name: str) -> Any:
    try:
        return json.loads(value) if value is not None else None
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=name) from None


@schedules.command("list")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@click.option("--cursor")
@operator_command(READ)
def schedules_list(principal: Any, as_json: bool, limit: int, cursor: str | None) -> None:
    """The namespace's schedules (GET /v1/schedules)."""
    from app.integrations import schedules as svc

    data = _read(lambda c: svc.list_schedules(c, principal.namespace_id, limit, cursor))
    if as_json:
        _emit_json(data)
        return
    rows = [
        (
            s["id"],
            s["name"],
            s.get("cron") or f"{s.get('interval_seconds')} s",
            s["timezone"],
            s["overlap"],
            s["paused"],
            s["next_fire_times"][0],
        )
        for s in data["items"]
    ]
    _console().print(
        _table("schedules", ["id", "name", "rule", "zone", "overlap", "paused", "next fire"], rows)
    )


@schedules.command("show")
@click.argument("schedule_id")
@operator_command(READ)
def schedules_show(principal: Any, as_json: bool, schedule_id: str) -> None:
    """One schedule with its next five fire times and last fire."""
    from app.integrations import schedules as svc

    _show(_read(lambda c: svc.get_schedule(c, principal.namespace_id, schedule_id)), as_json)


@schedules.command("fires")
@click.argument("schedule_id")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@operator_command(READ)
def schedules_fires(principal: Any, as_json: bool, schedule_id: str, limit: int) -> None:
    """The latest fires: launched or skipped (with the reason), missed periods coalesced."""
    from app.integrations import schedules as svc

    data = _read(lambda c: svc.list_fires(c, principal.namespace_id, schedule_id, limit))
    if as_json:
        _emit_json(data)
        return
    rows = [
        (
            f["fire_at"],
            f["kind"],
            f["status"],
            f["skipped_missed"],
            f.get("instance_id", ""),
            f.get("reason", ""),
        )
        for f in data["items"]
    ]
    _console().print(_table("fires", ["fire at", "kind", "status", "missed", "instance", "reason"], rows))


def _rule_options(fn: Any) -> Any:
    for opt in reversed(
        [
            click.option("--definition-id"),
            click.option("--version", "version"),
            click.option("--input", "input_json", help="the instance input (JSON)"),
            click.option("--cron", help='5 fields or @hourly/@daily/...; e.g. "30 8 * * 1-5"'),
            click.option("--timezone", help="IANA zone, e.g. Europe/Berlin (default UTC)"),
            click.option("--interval-seconds", type=int),
            click.option("--overlap", help="skip | allow | cancel_previous"),
            click.option("--fire-time-field", help="input key that receives the fire time"),
        ]
    ):
        fn = opt(fn)
    return fn


def _body(**kw: Any) -> dict[str, Any]:
    out = {k: v for k, v in kw.items() if v is not None and k != "input_json"}
    if kw.get("input_json") is not None:
        out["input"] = _json_arg(kw["input_json"], "--input")
    return out


@schedules.command("create")
@click.option("--name", required=True)
@_rule_options
@click.option("--paused", is_flag=True)
@operator_command(WRITE)
def schedules_create(principal: Any, as_json: bool, name: str, paused: bool, **kw: Any) -> None:
    """Create a schedule of a pinned version (validated as POST /v1/schedules; audited)."""
    from app.integrations import schedules as svc
    from schemas import load
    from schemas.schedules import CreateScheduleRequest

    body = load(CreateScheduleRequest(), {"name": name, "paused": paused, **_body(**kw)})
    _show(_write(lambda c: svc.create_schedule(c, principal, body, request_id=cli_request_id())), as_json)


@schedules.command("update")
@click.argument("schedule_id")
@_rule_options
@operator_command(WRITE)
def schedules_update(principal: Any, as_json: bool, schedule_id: str, **kw: Any) -> None:
    """Change a schedule (PATCH /v1/schedules/{id}); a new rule counts from now."""
    from app.integrations import schedules as svc
    from schemas import load
    from schemas.schedules import UpdateScheduleRequest

    changes = load(UpdateScheduleRequest(), _body(**kw))
    if not changes:
        raise CliFailure("INVALID_ARGUMENT", "nothing to change", as_json)
    _show(
        _write(
            lambda c: svc.update_schedule(c, principal, schedule_id, changes, request_id=cli_request_id())
        ),
        as_json,
    )


def _toggle(name: str, paused: bool, help_text: str) -> None:
    @schedules.command(name, help=help_text)
    @click.argument("schedule_id")
    @operator_command(WRITE)
    def _cmd(principal: Any, as_json: bool, schedule_id: str) -> None:
        from app.integrations import schedules as svc

        _show(
            _write(lambda c: svc.set_paused(c, principal, schedule_id, paused, request_id=cli_request_id())),
            as_json,
        )


_toggle("pause", True, "Pause a schedule: no scheduled fire launches until it is resumed.")
_toggle("resume", False, "Resume: the fire times missed while paused are coalesced into one launch.")


@schedules.command("launch")
@click.argument("schedule_id")
@operator_command(WRITE)
def schedules_launch(principal: Any, as_json: bool, schedule_id: str) -> None:
    """Launch now: one MANUAL fire through a schedule_launch job (the advance pool starts it)."""
    from app.integrations import schedules as svc

    data = _write(lambda c: svc.launch_now(c, principal, schedule_id, request_id=cli_request_id()))
    if as_json:
        _emit_json(data)
    else:
        click.echo(f"launch queued: fire {data['fire_at']}, job {data['job_id']}")


@schedules.command("delete")
@click.argument("schedule_id")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@operator_command(WRITE)
def schedules_delete(principal: Any, as_json: bool, schedule_id: str, yes: bool) -> None:
    """Delete a schedule (launched instances keep their schedule_id)."""
    from app.integrations import schedules as svc
    from ledgerflow.ops_cli import _confirm

    _confirm(f"delete schedule {schedule_id}?", yes)
    data = _write(lambda c: svc.delete_schedule(c, principal, schedule_id, request_id=cli_request_id()))
    _emit_json(data) if as_json else click.echo(f"deleted {schedule_id}")
