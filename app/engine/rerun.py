"""Rerun (issue 47): an operator command that starts a NEW workflow from a FAILED or CANCELLED one, on the
same or another published version of its definition, from the start or from a chosen step. The steps the
rule copies (``app.engine.rerun_rule``) are SUCCEEDED in the new workflow with the old outputs and are never
run (``workflow_steps.copied_from``); the chosen step and those after it run again. The old workflow is not
written (a terminal workflow stays terminal): the link lives in ``workflow_reruns`` and is read both ways
(``links``), and both workflows' audits carry the reason."""

from __future__ import annotations

from sqlalchemy import Connection

from app.auth import Principal
from app.engine import audit_entries, instances, rerun_rule
from app.engine.definitions import load_version
from app.engine.operator_commands import check_queue_scope, visible_instance
from app.engine.rerun_links import links
from app.engine.row_access import read_steps, step_specs
from app.engine.transitions import step_moves
from app.errors import InvalidArgument, StateConflict
from app.sql import query, run


def _compensated(inst: dict) -> list[str]:
    """The steps in the old run's compensation plan (whatever became of them): never copied."""
    comp = inst.get("compensation") or {}
    return [p["step_key"] for p in comp.get("plan") or [] if isinstance(p, dict) and "step_key" in p]


def plan(conn: Connection, old: dict, version: dict, from_step: str | None) -> list[str]:
    """The steps a rerun of ``old`` on ``version`` (as ``load_version`` reads it) from ``from_step`` copies;
    StateConflict with the rule's reason when it is refused."""
    old_steps = [rerun_rule.OldStep(s["key"], s["kind"], s["state"]) for s in read_steps(conn, old["id"])]
    new_steps = [
        rerun_rule.NewStep(s["key"], s["kind"], tuple(s.get("after", [])))
        for s in version["document"]["steps"]
    ]
    try:
        return rerun_rule.plan(old["state"], old_steps, _compensated(old), new_steps, from_step)
    except rerun_rule.Refused as exc:
        raise StateConflict(str(exc)) from exc


_RERUN_INSERT = query(
    "rerun_insert",
    "INSERT INTO workflow_reruns (instance_id, namespace_id, rerun_of, from_step, reason, actor_id, "
    "copied_steps) VALUES (:i, :ns, :of, :step, :reason, :actor, CAST(:copied AS text[]))",
)


def rerun_workflow(
    conn: Connection, principal: Principal, instance_id: str, req: dict, *, request_id: str | None
) -> dict:
    """Rerun ``instance_id`` (a loaded ``RerunRequest``: ``reason``, optional ``from_step`` and ``version``)
    in the caller's transaction: the new instance, its link and both audit rows. Returns
    ``{"instance", "rerun_of", "from_step", "copied_steps", "operation_id"}``."""
    old = visible_instance(conn, principal, instance_id)
    version_name = req.get("version") or old["version"]
    version = load_version(conn, principal.namespace_id, old["definition_id"], version_name)
    check_queue_scope(principal, list(version["queues"]))
    from_step = req.get("from_step")
    copied = plan(conn, old, version, from_step)

    def seed(c: Connection, inst: dict, rows: dict[str, dict]) -> dict[str, dict]:
        step_moves.copy_succeeded(c, inst["id"], old["id"], [rows[k] for k in copied])
        run(
            c,
            _RERUN_INSERT,
            {
                "i": inst["id"],
                "ns": principal.namespace_id,
                "of": old["id"],
                "step": from_step,
                "reason": req["reason"],
                "actor": principal.actor_id,
                "copied": copied,
            },
        )
        return {s["key"]: s for s in read_steps(c, inst["id"])} if copied else rows

    def started(c: Connection, inst: dict) -> None:
        audit_entries.started(c, principal, inst["id"], instances.instance_view(inst), request_id=request_id)

    body = {
        "definition_id": old["definition_id"],
        "version": version["version"],
        "input": old["input"],
        "business_key": old["business_key"],
    }
    try:
        new = instances.start_workflow(
            conn, principal.namespace_id, body, on_created=started, seed_steps=seed
        )
    except InvalidArgument as exc:
        raise InvalidArgument(
            "the old workflow's input does not satisfy this version's input contract", errors=exc.field_errors
        ) from exc
    view = instances.instance_view(new)
    detail = {"rerun_of": old["id"], "from_step": from_step, "copied_steps": copied}
    operation_id = audit_entries.operation(
        conn,
        principal,
        new["id"],
        "workflow.rerun",
        request_id=request_id,
        reason=req["reason"],
        before={"rerun_of": old["id"], "state": old["state"], "version": old["version"]},
        after={"instance": view, **detail},
    )
    audit_entries.operation(
        conn,
        principal,
        old["id"],
        "workflow.rerun_started",
        request_id=request_id,
        reason=req["reason"],
        before={"state": old["state"]},
        after={"rerun_id": new["id"], "version": version["version"], **detail},
    )
    return {"instance": view, **detail, "operation_id": operation_id}


def with_links(conn: Connection, view: dict) -> dict:
    """An instance view with its rerun links."""
    return {**view, **links(conn, view["id"])}


def version_steps(conn: Connection, inst: dict) -> list[str]:
    """The keys of the steps of the version ``inst`` runs (the console's "rerun from" choices)."""
    version = load_version(conn, inst["namespace_id"], inst["definition_id"], inst["version"])
    return sorted(step_specs(version["document"]))
