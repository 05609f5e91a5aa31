"""Fire-time computation of schedules (X-SCHED): aliases, validation, DST in Europe/Berlin, coalescing,
and Hypothesis properties (strictly increasing, nothing skipped between two answers, exact counts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.integrations.schedule_times import (
    MAX_COUNTED,
    Rule,
    RuleError,
    cron_expression,
    due,
    latest_at_or_before,
    next_after,
    upcoming,
    zone,
)


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)


BERLIN = "Europe/Berlin"


def test_aliases_expand_and_bad_expressions_name_the_field() -> None:
    assert cron_expression("@hourly") == "0 * * * *"
    assert cron_expression(" @Daily ") == "0 0 * * *"
    assert cron_expression("*/5  *   * * 1-5") == "*/5 * * * 1-5"
    for bad in ("", "* * * *", "* * * * * *", "61 * * * *", "@sometimes", "0 0 31 2 *", "x" * 300):
        with pytest.raises(RuleError) as err:
            cron_expression(bad)
        assert err.value.field == "cron"
    with pytest.raises(RuleError) as err:
        zone("Mars/Olympus")
    assert err.value.field == "timezone"
    with pytest.raises(RuleError) as err:
        zone("../etc/passwd")
    assert err.value.field == "timezone"
    with pytest.raises(RuleError) as err:
        Rule(interval_seconds=0, anchor=utc(2026, 1, 1))
    assert err.value.field == "interval_seconds"


def test_spring_forward_gap_fires_once_at_the_first_real_minute() -> None:
    # 2026-03-29: Berlin jumps from 02:00 CET to 03:00 CEST; 02:30 does not exist that day
    r = Rule(cron="30 2 * * *", timezone=BERLIN)
    assert upcoming(r, utc(2026, 3, 28, 12), 3) == [
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST, the first real minute after the gap
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        utc(2026, 3, 31, 0, 30),
    ]
    hourly = Rule(cron=cron_expression("@hourly"), timezone=BERLIN)
    # 01:00 CET, then 03:00 CEST: the hour 02:00 does not exist, nothing fires twice
    assert upcoming(hourly, utc(2026, 3, 28, 23, 30), 3) == [
        utc(2026, 3, 29, 0, 0),
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 29, 2, 0),
    ]


def test_fall_back_repeat_fires_a_fixed_time_once_and_a_wildcard_hour_in_both_passes() -> None:
    # 2026-10-25: Berlin goes from 03:00 CEST back to 02:00 CET; 02:30 happens twice
    r = Rule(cron="30 2 * * *", timezone=BERLIN)
    assert upcoming(r, utc(2026, 10, 24, 12), 3) == [
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST, the first pass only
        utc(2026, 10, 26, 1, 30),  # 02:30 CET
        utc(2026, 10, 27, 1, 30),
    ]
    # asked from inside the second pass, the fixed time is not fired again
    assert next_after(r, utc(2026, 10, 25, 1, 15)) == utc(2026, 10, 26, 1, 30)
    hourly = Rule(cron="0 * * * *", timezone=BERLIN)
    assert upcoming(hourly, utc(2026, 10, 24, 23, 30), 3) == [
        utc(2026, 10, 25, 0, 0),  # 02:00 CEST
        utc(2026, 10, 25, 1, 0),  # 02:00 CET, the repeated hour
        utc(2026, 10, 25, 2, 0),  # 03:00 CET
    ]


def test_coalescing_counts_the_missed_fire_times() -> None:
    r = Rule(cron="*/5 * * * *")
    d = due(r, utc(2026, 1, 1, 0, 5), utc(2026, 1, 1, 1, 2))
    assert d is not None
    assert (d.fire_at, d.skipped, d.capped, d.following) == (
        utc(2026, 1, 1, 1, 0),
        11,
        False,
        utc(2026, 1, 1, 1, 5),
    )
    assert due(r, utc(2026, 1, 1, 0, 5), utc(2026, 1, 1, 0, 4, 59)) is None
    # years of missed minutes: bounded work, a capped count, still the latest fire time
    every_minute = Rule(cron="* * * * *")
    d = due(every_minute, utc(2020, 1, 1), utc(2026, 1, 1, 0, 0, 30))
    assert d is not None and d.capped and d.skipped == MAX_COUNTED
    assert d.fire_at == utc(2026, 1, 1) and d.following == utc(2026, 1, 1, 0, 1)


def test_interval_rules_count_from_the_anchor() -> None:
    r = Rule(interval_seconds=10, anchor=utc(2026, 1, 1))
    assert upcoming(r, utc(2026, 1, 1), 2) == [utc(2026, 1, 1, 0, 0, 10), utc(2026, 1, 1, 0, 0, 20)]
    assert latest_at_or_before(r, utc(2026, 1, 1, 0, 0, 9)) is None
    d = due(r, utc(2026, 1, 1, 0, 0, 10), utc(2026, 1, 1, 0, 1, 5))
    assert d is not None and (d.fire_at, d.skipped) == (utc(2026, 1, 1, 0, 1), 5)


CRONS = st.sampled_from(
    ["* * * * *", "*/7 * * * *", "30 2 * * *", "0 * * * *", "15 1-3 * * 0", "0 0 1 * *", "45 23 * * 1-5"]
)
ZONES = st.sampled_from(["UTC", BERLIN, "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"])
TIMES = st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 31)).map(
    lambda d: d.replace(tzinfo=UTC)
)


@settings(max_examples=150, deadline=None)
@given(CRONS, ZONES, TIMES)
def test_cron_fire_times_increase_and_nothing_lies_between(cron: str, tz: str, t: datetime) -> None:
    r = Rule(cron=cron, timezone=tz)
    times = upcoming(r, t, 5)
    assert all(a < b for a, b in zip([t, *times], times, strict=False))
    for a, b in zip(times, times[1:], strict=False):
        # asking from any point between two answers gives the later one: nothing is skipped
        mid = a + (b - a) / 2
        assert next_after(r, mid) == b
        assert latest_at_or_before(r, mid) == a


@settings(max_examples=150, deadline=None)
@given(CRONS, ZONES, TIMES, st.integers(min_value=0, max_value=300))
def test_due_coalesces_exactly(cron: str, tz: str, t: datetime, minutes: int) -> None:
    r = Rule(cron=cron, timezone=tz)
    first = next_after(r, t)
    now = first + timedelta(minutes=minutes, seconds=7)
    d = due(r, first, now)
    assert d is not None
    fired = [first]
    while (n := next_after(r, fired[-1])) <= now:
        fired.append(n)
    assert (d.fire_at, d.skipped, d.following) == (fired[-1], len(fired) - 1, next_after(r, now))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=100_000), TIMES, TIMES)
def test_interval_due_matches_counting(interval: int, anchor: datetime, later: datetime) -> None:
    r = Rule(interval_seconds=interval, anchor=anchor)
    first = next_after(r, anchor)
    assert first == anchor + timedelta(seconds=interval)
    d = due(r, first, later)
    if later < first:
        assert d is None
        return
    assert d is not None
    k = (later - anchor) // timedelta(seconds=interval)
    assert d.fire_at == anchor + timedelta(seconds=interval * k)
    assert d.skipped == k - 1
    assert d.following == d.fire_at + timedelta(seconds=interval) and d.following > later >= d.fire_at


def test_fire_decision_table() -> None:
    from app.integrations.schedule_times import fire_decision

    assert fire_decision("MANUAL", True, "skip", 3) == "LAUNCH"
    assert fire_decision("SCHEDULED", True, "allow", 0) == "PAUSED"
    assert fire_decision("SCHEDULED", False, "skip", 0) == "LAUNCH"
    assert fire_decision("SCHEDULED", False, "skip", 1) == "OVERLAP"
    assert fire_decision("SCHEDULED", False, "allow", 5) == "LAUNCH"
    assert fire_decision("SCHEDULED", False, "cancel_previous", 2) == "CANCEL_THEN_LAUNCH"
    assert fire_decision("SCHEDULED", False, "cancel_previous", 0) == "LAUNCH"
