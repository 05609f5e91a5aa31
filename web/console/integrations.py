"""Integration pages (X-EVENT, X-AUTO): event subscriptions with their delivery log (attempts, answers,
latency), redelivery of one delivery or of every unsuccessful one since a time, secret rotation (the new
secret shown once, on the answer page only), enable / disable; automation rules with their execution log,
enable / disable. The API's scope (``integrations:manage``), schemas and functions (audited there)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from flask import Response, render_template, request
from sqlalchemy import Connection

import schemas
from app.auth import Scope
from app.db import transaction
from app.engine import lookup
from app.integrations import automation, subscriptions
from app.ledger.job_actions import Actor
from schemas.integrations import ReasonRequest, RedeliverSinceRequest, RotateRequest
from web.console.common import (
    bp,
    clean_args,
    done,
    in_place,
    page,
    pager,
    principal,
    read,
    require_confirmation,
    rfc3339_of_local,
)
from web.http import request_id

MANAGE = Scope.INTEGRATIONS_MANAGE
PAGE_SIZE = 50


def _ns() -> str:
    return principal().namespace_id


@bp.get("/integrations", endpoint="subscriptions")
@page(MANAGE)
def subscriptions_page() -> str:
    ns = _ns()
    subs_cursor, rules_cursor = request.args.get("cursor") or None, request.args.get("rules") or None

    def load(c: Connection) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
        subs = subscriptions.list_page(c, ns, PAGE_SIZE, subs_cursor)
        rules = automation.list_rules(c, ns, PAGE_SIZE, rules_cursor)
        actions = [r["action"] if isinstance(r["action"], dict) else {} for r in rules["items"]]
        wanted = [x.get("definition_id") or "" for x in (*subs["items"], *rules["items"], *actions)]
        return subs, rules, lookup.definition_names(c, [str(w) for w in wanted])

    subs, rules, names = read(load)
    return render_template(
        "console/integrations.html",
        names=names,
        subs=subs["items"],
        rules=rules["items"],
        sub_pages=pager(request.args, subs.get("next_cursor"), len(subs["items"]), PAGE_SIZE),
        rule_pages=pager(
            request.args, rules.get("next_cursor"), len(rules["items"]), PAGE_SIZE, cursor_key="rules"
        ),
    )


def _subscription_page(sid: str, secret: str | None = None) -> str:
    ns = _ns()
    cursor = request.args.get("cursor") or None if request.method == "GET" else None

    def load(c: Connection) -> tuple[dict[str, Any], dict[str, Any], dict[str, str], dict[str, str]]:
        sub = subscriptions.get(c, ns, sid)
        log = subscriptions.deliveries(c, ns, sid, PAGE_SIZE, cursor)
        return (
            sub,
            log,
            lookup.event_workflows(c, ns, (d["event_id"] for d in log["items"])),
            lookup.definition_names(c, [sub["definition_id"] or ""]),
        )

    sub, log, event_workflows, names = read(load)
    return render_template(
        "console/subscription.html",
        sub=sub,
        deliveries=log["items"],
        event_workflows=event_workflows,
        names=names,
        secret=secret,
        pages=pager(request.args, log.get("next_cursor"), len(log["items"]), PAGE_SIZE),
    )


@bp.get("/integrations/subscriptions/<sid>")
@page(MANAGE)
def subscription(sid: str) -> str:
    return _subscription_page(sid)


def _reason() -> str | None:
    return schemas.load(ReasonRequest(), {"reason": request.form.get("reason", "").strip() or None}).get(
        "reason"
    )


def _toggle(what: str, set_enabled: Any, rerender: Any, endpoint: str, **values: str) -> Response:
    """Enable or disable a subscription or a rule: the confirmation, an optional reason (checked like
    the API's), the domain function (audited there), back to its page."""

    def work() -> Response:
        enable = request.form.get("enabled") == "true"
        reason = _reason()
        require_confirmation(request.form)
        with transaction() as conn:
            set_enabled(conn, principal(), request_id(), *values.values(), enable, reason)
        return done(f"{what} {'enabled' if enable else 'disabled'}.", endpoint, **values)

    return in_place("enabled", ("reason", "confirm"), work, rerender)


@bp.post("/integrations/subscriptions/<sid>/enabled")
@page(MANAGE)
def subscription_enabled(sid: str) -> Response:
    return _toggle(
        "Subscription",
        subscriptions.set_enabled,
        lambda: _subscription_page(sid),
        "console.subscription",
        sid=sid,
    )


@bp.post("/integrations/subscriptions/<sid>/rotate")
@page(MANAGE)
def subscription_rotate(sid: str) -> Response | str:
    def work() -> Any:
        raw = clean_args(request.form, ints=("grace_seconds",))
        body = schemas.load(RotateRequest(), {k: v for k, v in raw.items() if k == "grace_seconds"})
        require_confirmation(request.form)
        with transaction() as conn:
            out = subscriptions.rotate(conn, principal(), request_id(), sid, body.get("grace_seconds"))
        # shown once, on this answer only (never through the session cookie, never in a redirect)
        return _subscription_page(sid, secret=out["secret"])

    return in_place("rotate", ("grace_seconds", "confirm"), work, lambda: _subscription_page(sid))


@bp.post("/integrations/subscriptions/<sid>/deliveries/<delivery_id>/redeliver")
@page(MANAGE)
def redeliver_one(sid: str, delivery_id: str) -> Response:
    def work() -> Response:
        reason = _reason()
        require_confirmation(request.form)
        with transaction() as conn:
            out = subscriptions.redeliver_one(
                conn, Actor(principal(), request_id(), reason), sid, delivery_id
            )
        what = "queued again (same webhook-id)" if out.get("submitted") else "not queued"
        return done(f"Delivery {delivery_id} {what}.", "console.subscription", sid=sid)

    return in_place(f"redeliver-{delivery_id}", ("reason", "confirm"), work, lambda: _subscription_page(sid))


@bp.post("/integrations/subscriptions/<sid>/redeliver")
@page(MANAGE)
def redeliver_since(sid: str) -> Response:
    def work() -> Response:
        raw = {
            k: v
            for k, v in clean_args(request.form, ints=("rate",)).items()
            if k in ("since", "include_succeeded", "rate")
        }
        if "since" in raw:
            raw["since"] = rfc3339_of_local(raw["since"])
        raw["include_succeeded"] = request.form.get("include_succeeded") == "yes"
        body = schemas.load(RedeliverSinceRequest(), raw)
        require_confirmation(request.form)
        with transaction() as conn:
            out = subscriptions.redeliver_since(
                conn,
                Actor(principal(), request_id()),
                sid,
                body["since"].astimezone(UTC),
                include_succeeded=body["include_succeeded"],
                rate=body["rate"],
            )
        return done(
            f"Redelivery: {out['submitted']} of {out['matched']} matching delivery(ies) queued at "
            f"{out['rate']}/s.",
            "console.subscription",
            sid=sid,
        )

    return in_place(
        "redeliver-since",
        ("since", "include_succeeded", "rate", "confirm"),
        work,
        lambda: _subscription_page(sid),
    )


# --------------------------------------------------------------------------- automation rules
def _rule_page(rule_id: str) -> str:
    ns = _ns()
    cursor = request.args.get("cursor") or None if request.method == "GET" else None

    def load(c: Connection) -> tuple[dict[str, Any], dict[str, Any], dict[str, str], dict[str, str]]:
        rule = automation.get_rule(c, ns, rule_id)
        log = automation.executions(c, ns, rule_id, PAGE_SIZE, cursor)
        action = rule["action"] if isinstance(rule["action"], dict) else {}
        return (
            rule,
            log,
            lookup.event_workflows(c, ns, (x["event_id"] for x in log["items"])),
            lookup.definition_names(c, [rule["definition_id"] or "", str(action.get("definition_id") or "")]),
        )

    rule, log, event_workflows, names = read(load)
    return render_template(
        "console/rule.html",
        rule=rule,
        executions=log["items"],
        event_workflows=event_workflows,
        names=names,
        pages=pager(request.args, log.get("next_cursor"), len(log["items"]), PAGE_SIZE),
    )


@bp.get("/integrations/rules/<rule_id>")
@page(MANAGE)
def rule(rule_id: str) -> str:
    return _rule_page(rule_id)


@bp.post("/integrations/rules/<rule_id>/enabled")
@page(MANAGE)
def rule_enabled(rule_id: str) -> Response:
    return _toggle(
        "Rule", automation.set_rule_enabled, lambda: _rule_page(rule_id), "console.rule", rule_id=rule_id
    )
