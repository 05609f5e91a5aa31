"""``ledgerflow workflows rerun|batch|failure-groups`` (issue 47): the operator actions on workflows from
the shell. Like ``ledgerflow workflows pause``, they authenticate an operator token and call the domain
commands the API calls (``app.engine.rerun``, ``batch``, ``failure_groups``), which audit them."""

from __future__ import annotations

from typing import Any

import click

from ledgerflow.ops_cli import (
    WF_CONTROL,
    WF_READ,
    _confirm,
    _console,
    _emit_json,
    _read,
    _table,
    _write,
    cli_request_id,
    operator_command,
    workflows,
)

FILTER_OPTIONS = (
    ("state", "--state"),
    ("definition_id", "--definition-id"),
    ("id_prefix", "--id-prefix"),
    ("business_key_prefix", "--business-key-prefix"),
    ("failed_step", "--failed-step"),
    ("error_code", "--error-code"),
    ("error_group", "--error-group"),
)


@workflows.command("rerun")
@click.argument("instance_id")
@click.option("--reason", required=True, help="why (written to both workflows' audit)")
@click.option("--from-step", help="rerun from this step (default: from the start)")
@click.option("--version", help="a published version of the definition (default: the old workflow's)")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@operator_command(WF_CONTROL)
def workflows_rerun(
    principal: Any,
    as_json: bool,
    instance_id: str,
    reason: str,
    from_step: str | None,
    version: str | None,
    yes: bool,
) -> None:
    """Start a new workflow from a FAILED or CANCELLED one (POST /v1/workflows/{id}/rerun): the steps before
    --from-step keep their outputs, it and those after it run again."""
    from app.engine import rerun
    from schemas import load
    from schemas.workflow_ops import RerunRequest

    body = {
        "reason": reason,
        **({"from_step": from_step} if from_step else {}),
        **({"version": version} if version else {}),
    }
    req = load(RerunRequest(), body)
    where = f"from step {from_step}" if from_step else "from the start"
    _confirm(f"Rerun workflow {instance_id} {where}?", yes)
    request_id = cli_request_id()
    done = _write(lambda c: rerun.rerun_workflow(c, principal, instance_id, req, request_id=request_id))
    if as_json:
        _emit_json(done)
        return
    copied = ", ".join(done["copied_steps"]) or "none"
    _console().print(
        f"workflow {done['instance']['id']} reruns {instance_id} {where}: {done['instance']['state']} "
        f"(copied: {copied})"
    )


@workflows.command("batch")
@click.argument("action", type=click.Choice(["cancel", "pause", "resume", "rerun"]))
@click.option("--id", "ids", multiple=True, help="a workflow id (repeat); or use the filter options")
@click.option("--state")
@click.option("--definition-id")
@click.option("--id-prefix")
@click.option("--business-key-prefix", help="in any case")
@click.option("--failed-step")
@click.option("--error-code")
@click.option("--error-group", help="a failure group's normalised message")
@click.option("--reason", required=True, help="why (written to each workflow's audit)")
@click.option("--from-step", help="rerun: from this step")
@click.option("--version", help="rerun: on this published version")
@click.option("--preview", is_flag=True, help="only show what would change")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@operator_command(WF_CONTROL)
def workflows_batch(
    principal: Any,
    as_json: bool,
    action: str,
    ids: tuple[str, ...],
    reason: str,
    from_step: str | None,
    version: str | None,
    preview: bool,
    yes: bool,
    **filters: str | None,
) -> None:
    """Cancel, pause, resume or rerun many workflows (POST /v1/workflows/batch): the ids given, or the newest
    workflows the filter matches (at most LEDGERFLOW_WORKFLOW_BATCH_MAX). Without --preview it first shows
    the preview and asks."""
    from app.engine import batch
    from schemas import load
    from schemas.workflow_ops import BatchRequest

    body: dict[str, Any] = {"action": action.upper(), "reason": reason}
    if ids:
        body["ids"] = list(ids)
    else:
        body["filter"] = {k: v for k, v in filters.items() if v is not None}
    body.update({k: v for k, v in (("from_step", from_step), ("version", version)) if v})
    req = load(BatchRequest(), {**body, "preview": True})
    request_id = cli_request_id()
    seen = _read(lambda c: batch.batch(c, principal, req, request_id=request_id))
    if preview:
        _show(seen, as_json)
        return
    _confirm(f"{action} {seen['submitted']} workflow(s) ({seen['skipped_for_state']} would be skipped)?", yes)
    req = load(BatchRequest(), body)
    _show(_write(lambda c: batch.batch(c, principal, req, request_id=request_id)), as_json)


def _show(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _emit_json(result)
        return
    verb = "would act on" if result["preview"] else "acted on"
    console = _console()
    console.print(
        f"{result['action']}: {verb} {result['submitted']} of {result['matched']} matched workflow(s); "
        f"{result['skipped_for_state']} skipped for their state, {result['not_found']} not found"
        + (f", {result['remaining']} more match (run again)" if result["remaining"] else "")
    )
    if result["skipped"]:
        console.print(
            _table(
                "skipped",
                ["id", "state", "reason"],
                [(s["id"], s["status"] or "", s["reason"]) for s in result["skipped"][:50]],
            )
        )


@workflows.command("failure-groups")
@click.option("--definition-id")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@operator_command(WF_READ)
def workflows_failure_groups(principal: Any, as_json: bool, definition_id: str | None, limit: int) -> None:
    """FAILED and NEEDS_REVIEW workflows grouped by definition, step, error code and normalised message
    (GET /v1/workflows/failure-groups); rerun one with `workflows batch rerun --error-group ...`."""
    from app.engine import failure_groups

    data = _read(
        lambda c: failure_groups.groups(
            c, principal.namespace_id, principal.queues, definition_id=definition_id, limit=limit
        )
    )
    if as_json:
        _emit_json(data)
        return
    rows = [
        (
            g["count"],
            g["definition_name"],
            g["step_key"] or "",
            g["error_code"] or "",
            g["message_group"],
            g["last_seen"],
        )
        for g in data["groups"]
    ]
    _console().print(
        _table(
            f"{data['group_count']} failure group(s)",
            ["count", "definition", "step", "code", "message", "last seen"],
            rows,
        )
    )
