"""Batch actions on workflows (issue 47): cancel, pause, resume or rerun a selection (ids) or everything a
list filter matches, at most ``LEDGERFLOW_WORKFLOW_BATCH_MAX`` per request (a filter acts on the newest
that many and says how many remain), with a preview that changes nothing. Each workflow goes through the
one-workflow command (``operator_commands.control_workflow``, ``rerun.rerun_workflow``), so each writes its own
audit row; the batch writes one more (``workflows.batch_<action>``). The answer has the shape of the job
ledger's batch actions (``app.ledger.job_actions``): ``submitted`` / ``skipped_for_state`` / ``not_found``
counts, ``submitted_ids``, ``skipped`` ({id, status, reason}) and ``items``.

A refusal (the state, a stale read, a rerun the rule refuses, an input the rerun's version refuses) is
found before the workflow is written, so a refused workflow is skipped and the others go on; any other
error (a quota) fails the whole request (its transaction)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app import audit, settings
from app.auth import Principal
from app.engine import instances, operator_commands, rerun
from app.engine.decide import stopping as decide
from app.engine.decide.model import Refuse
from app.engine.definitions import load_version
from app.engine.snapshot import inst_model
from app.errors import InvalidArgument, NotFound, StateConflict
from app.ids import new_id

ACTIONS = ("CANCEL", "PAUSE", "RESUME", "RERUN")
COUNT_CAP = 100_000  # a filter's matches are counted up to this many


def _refusal(conn: Connection, principal: Principal, inst: dict, req: dict) -> str | None:
    """Why ``req['action']`` would not act on ``inst`` now (None: it would)."""
    if req["action"] != "RERUN":
        verdict = decide.control(inst_model(inst), req["action"], inst["control_revision"])
        return verdict.message if isinstance(verdict, Refuse) else None
    try:
        version = load_version(
            conn, principal.namespace_id, inst["definition_id"], req.get("version") or inst["version"]
        )
        operator_commands.check_queue_scope(principal, list(version["queues"]))
        rerun.plan(conn, inst, version, req.get("from_step"))
    except (StateConflict, NotFound) as exc:
        return str(exc)
    return None


def _act(conn: Connection, principal: Principal, inst: dict, req: dict, request_id: str) -> dict:
    if req["action"] == "RERUN":
        done = rerun.rerun_workflow(
            conn,
            principal,
            inst["id"],
            {k: req[k] for k in ("reason", "from_step", "version") if req.get(k) is not None},
            request_id=request_id,
        )
        return {"id": inst["id"], "rerun_id": done["instance"]["id"], "state": done["instance"]["state"]}
    view = operator_commands.control_workflow(
        conn,
        principal,
        inst["id"],
        {
            "operation": req["action"],
            "expected_control_revision": inst["control_revision"],
            "reason": req["reason"],
        },
        request_id=request_id,
    )
    return {"id": inst["id"], "state": view["state"], "paused": view["paused"]}


def select(conn: Connection, principal: Principal, req: dict) -> tuple[list[str], int]:
    """The workflows a batch acts on (at most the configured number) and how many its selection matched."""
    limit = settings.WORKFLOW_BATCH_MAX.get()
    if "ids" in req:
        ids = list(dict.fromkeys(req["ids"]))
        if len(ids) > limit:
            raise InvalidArgument(
                f"at most {limit} workflows per batch (LEDGERFLOW_WORKFLOW_BATCH_MAX)", field="ids"
            )
        return ids, len(ids)
    f = req["filter"]
    ids = instances.matching_ids(conn, principal.namespace_id, f, principal.queues, limit)
    matched = (
        len(ids)
        if len(ids) < limit
        else instances.count_instances(conn, principal.namespace_id, f, principal.queues, COUNT_CAP)
    )
    return ids, matched


def batch(conn: Connection, principal: Principal, req: dict, *, request_id: str) -> dict[str, Any]:
    """Run (or, with ``preview``, only judge) ``req['action']`` on the selection, in the caller's transaction."""
    ids, matched = select(conn, principal, req)
    preview = bool(req.get("preview"))
    operation_id = new_id()
    submitted: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    state_skips = 0
    for iid in ids:
        try:
            inst = operator_commands.visible_instance(conn, principal, iid)
        except NotFound:
            skipped.append({"id": iid, "status": None, "reason": "not found"})
            continue
        refusal = _refusal(conn, principal, inst, req)
        if refusal is None and not preview:
            try:
                submitted.append(_act(conn, principal, inst, req, request_id))
                continue
            except (StateConflict, InvalidArgument) as exc:  # raised before the workflow was written
                refusal = str(exc)
        if refusal is None:
            submitted.append({"id": iid, "state": inst["state"], "paused": inst["paused"]})
        else:
            skipped.append({"id": iid, "status": inst["state"], "reason": refusal})
            state_skips += 1
    action = req["action"].lower()
    if not preview:
        audit.record(
            conn,
            principal=principal,
            request_id=request_id,
            action=f"workflows.batch_{action}",
            target_type="workflow_batch",
            target_id=operation_id,
            operation_id=operation_id,
            reason=req["reason"],
            before={
                "requested": ids,
                "matched": matched,
                **({"filter": {k: str(v) for k, v in req["filter"].items()}} if "filter" in req else {}),
            },
            after={"submitted": [s["id"] for s in submitted], "skipped": [s["id"] for s in skipped]},
        )
    return {
        "operation_id": None if preview else operation_id,
        "action": req["action"],
        "preview": preview,
        "matched": matched,
        "remaining": max(0, matched - len(ids)),
        "limit": settings.WORKFLOW_BATCH_MAX.get(),
        "submitted": len(submitted),
        "skipped_for_state": state_skips,
        "not_found": len(skipped) - state_skips,
        "submitted_ids": [s["id"] for s in submitted],
        "skipped": skipped,
        "items": submitted,
    }
