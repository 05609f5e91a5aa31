"""``delay_wake`` wakes of control and signals (dispatched by ``handlers.timers.delay_wake``)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection


def _signal_expiry(conn: Connection, inst: dict, payload: dict) -> dict:
    from app.engine import signals

    if not signals.expire(conn, payload["signal_id"]):
        return {"skipped": "the signal was settled or is not due"}
    return {"expired_signal": payload["signal_id"]}


def _cancel_settle(conn: Connection, inst: dict, payload: dict) -> dict:
    from app.engine import control

    if inst["state"] != "CANCELLING":
        return {"skipped": f"the workflow is {inst['state']}"}
    return {"state": control.try_finish_cancel(conn, inst["id"])["state"]}


WAKES: dict[str, Callable[[Connection, dict, dict], dict]] = {
    "signal_expiry": _signal_expiry,
    "cancel_settle": _cancel_settle,
}
