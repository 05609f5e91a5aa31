"""``workflows show`` / ``watch`` (ledgerflow.step_table): a paused wait or retry backoff is shown with its
time left, never as a fire time (which passes while the workflow is paused)."""

from __future__ import annotations

from ledgerflow.step_table import detail

TIMER = {"step": {"key": "t", "kind": "TIMER", "state": "WAITING"}}
SIGNAL = {"step": {"key": "s", "kind": "SIGNAL", "state": "WAITING"}}
WAIT = {"id": "w", "state": "WAITING", "deadline_at": "2026-12-05T10:00:00Z"}


def test_a_paused_timer_shows_its_time_left():
    view = {**TIMER, "wait": {**WAIT, "kind": "TIMER", "paused": True, "remaining_ms": 3_540_000}}
    assert detail(view) == "timer paused, 59 min left"
    running = {**TIMER, "wait": {**WAIT, "kind": "TIMER"}}
    assert detail(running) == "timer until 2026-12-05T10:00:00Z"


def test_a_paused_signal_timeout_shows_its_time_left():
    wait = {
        **WAIT,
        "kind": "SIGNAL",
        "name": "go",
        "payload_version": "v1",
        "paused": True,
        "remaining_ms": 86_400_000,
    }
    assert detail({**SIGNAL, "wait": wait}) == "signal go (v1), timeout paused with 1 d left"
    no_timeout = {**wait, "deadline_at": None}
    del no_timeout["remaining_ms"]
    assert detail({**SIGNAL, "wait": no_timeout}) == "signal go (v1)"


def test_a_paused_retry_backoff_shows_its_time_left():
    view = {
        "step": {"key": "c", "kind": "TASK", "state": "WAITING"},
        "next_attempt_at": "2026-12-05T10:00:00Z",
        "next_attempt_remaining_ms": 600_000,
    }
    assert detail(view) == "next attempt paused, 10 min left"
