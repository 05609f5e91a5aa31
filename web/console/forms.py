"""Forms that create work: start a workflow on a pinned version (W-START) and send a signal to a waiting
step (W-SIG). Each is validated by the API's own schema (``StartRequest``, ``SignalRequest``) and the
engine's contract checks; a refusal shows the form again with each error beside its field and every
value kept. The start writes the API's ``workflow.start`` audit entry; the signal goes through
``app.engine.operator_commands.send_signal`` (acceptance audited on the signal)."""

from __future__ import annotations

from typing import Any

from flask import Response, flash, redirect, render_template, request, url_for

import schemas
from app.auth import Scope
from app.db import transaction
from app.engine import definitions, instances, operator_commands, overview
from app.errors import NotFound
from app.ids import is_hex32
from schemas.workflow_control import SignalRequest
from schemas.workflows import StartRequest
from web.console.common import (
    bp,
    clean_args,
    in_place,
    json_field,
    page,
    principal,
    read,
    require_confirmation,
)
from web.console.workflows import readable_instance
from web.engine_common import start_audit, start_queue_check
from web.http import request_id

START, SIGNAL = Scope.WORKFLOWS_START, Scope.WORKFLOWS_SIGNAL
DEFINITION_CHOICES = 100
START_FIELDS = ("definition_id", "version", "input", "business_key", "confirm")
SIGNAL_FIELDS = (
    "name",
    "payload_version",
    "target_step_key",
    "target_activation_sequence",
    "correlation_key",
    "payload",
    "reason",
    "evidence_ref",
    "confirm",
)


def _start_page() -> str:
    ns = principal().namespace_id
    source = request.args if request.method == "GET" else request.form
    def_id, version = source.get("definition_id", ""), source.get("version", "")

    def load(c: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "choices": definitions.list_definitions(c, ns, None, DEFINITION_CHOICES, None)["items"],
            "contract": None,
        }
        if is_hex32(def_id) and version:
            try:
                out["contract"] = definitions.get_contract(c, ns, def_id, version)
            except NotFound:
                pass  # the form says so beside the field when it is submitted
        return out

    return render_template("console/start.html", **read(load), definition_id=def_id, version=version)


@bp.get("/workflows/start", endpoint="start_form")
@page(START)
def start_form() -> str:
    return _start_page()


@bp.post("/workflows/start")
@page(START)
def start_submit() -> Response:
    def work() -> Response:
        form = request.form
        raw: dict[str, Any] = {
            k: v for k, v in clean_args(form).items() if k in ("definition_id", "version", "business_key")
        }
        raw["input"] = json_field(form.get("input"), "input")
        body = schemas.load(StartRequest(), raw)
        require_confirmation(form)
        p = principal()
        with transaction() as conn:
            inst = instances.start_workflow(
                conn,
                p.namespace_id,
                body,
                check_queues=start_queue_check(p),
                on_created=start_audit(p, request_id()),
            )
        flash(f"Workflow {inst['id']} started: {inst['state']}.")
        return redirect(url_for("console.workflow", instance_id=inst["id"]))  # type: ignore[return-value]  # a werkzeug Response

    return in_place("start", START_FIELDS, work, _start_page)


def _signal_page(instance_id: str) -> str:
    def load(c: Any) -> dict[str, Any]:
        inst = readable_instance(c, instance_id)
        if inst["namespace_id"] != principal().namespace_id:
            raise NotFound("workflow not found")
        steps = overview.steps_in_order(c, inst)
        contract = definitions.get_contract(c, inst["namespace_id"], inst["definition_id"], inst["version"])
        waiting = [
            s
            for s in steps
            if s.get("wait") and s["wait"].get("kind") != "TIMER" and s["wait"]["state"] == "WAITING"
        ]
        return {
            "instance": instances.instance_view(inst),
            "signals": contract["signals"],
            "waiting": waiting,
            "steps": [s for s in steps if s["kind"] in ("SIGNAL", "POLL")],
        }

    return render_template("console/signal.html", **read(load))


@bp.get("/workflows/<instance_id>/signal", endpoint="signal_form")
@page(SIGNAL)
def signal_form(instance_id: str) -> str:
    return _signal_page(instance_id)


@bp.post("/workflows/<instance_id>/signal")
@page(SIGNAL)
def signal_submit(instance_id: str) -> Response:
    def work() -> Response:
        form = request.form
        raw: dict[str, Any] = {
            k: v
            for k, v in clean_args(form, ints=("target_activation_sequence",)).items()
            if k in SIGNAL_FIELDS and k not in ("payload", "confirm")
        }
        raw["payload"] = json_field(form.get("payload"), "payload")
        req = schemas.load(SignalRequest(), raw)
        require_confirmation(form)
        with transaction() as conn:
            sig = operator_commands.send_signal(conn, principal(), instance_id, req, request_id=request_id())
        flash(
            f"Signal {sig['name']} accepted: {sig['state']}{' (' + sig['disposition'] + ')' if sig.get('disposition') else ''}."
        )
        return redirect(url_for("console.workflow", instance_id=instance_id))  # type: ignore[return-value]  # a werkzeug Response

    return in_place("signal", SIGNAL_FIELDS, work, lambda: _signal_page(instance_id))
