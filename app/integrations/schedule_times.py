"""Fire times of a schedule (X-SCHED), pure: no database, no clock (``now`` is always an argument).

A rule is either a 5-field cron expression (or an ``@hourly``-style alias) read in an IANA time zone,
parsed and iterated by ``cronsim`` (never by hand), or a fixed interval counted from an anchor.
Every time handed out is an aware UTC ``datetime``; comparisons are made in UTC only (aware times of
one zone compare by wall clock in Python, which is wrong inside a repeated hour).

Daylight saving (cronsim follows Debian cron for expressions with a fixed minute and hour):
- spring forward: a fixed time inside the gap (``30 2 * * *`` on the day 02:00-03:00 does not exist)
  fires once, at the first real minute after the gap (03:00 local);
- fall back: a fixed time inside the repeated hour fires once, in the first pass (summer time);
- an expression with a wildcard minute or hour (``*/15 * * * *``, ``@hourly``) fires at every real
  instant whose local time matches: in both passes of a repeated hour, never inside a gap;
- whatever the zone does, ``next_after`` never returns a time at or before the one it was given, so
  no fire time is ever repeated or goes backwards.

Work is bounded: every iteration loop has a fixed cap (``MAX_STEPS``); a caller asking how many fire
times were missed gets an exact count up to ``MAX_COUNTED`` and a flag beyond it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

ALIASES: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_CRON_CHARS = 200
MIN_INTERVAL_SECONDS = 1
MAX_INTERVAL_SECONDS = 366 * 24 * 3600
MAX_STEPS = 64  # DST guard: candidates skipped because they were not after the given time
MAX_COUNTED = 1000  # missed fire times counted one by one, at most
MAX_UPCOMING = 10
_US = timedelta(microseconds=1)


class RuleError(ValueError):
    """A rule that cannot be used; ``field`` names the request field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def cron_expression(expr: str) -> str:
    """The 5-field expression of ``expr`` (an alias is expanded); ``RuleError`` when cronsim refuses it."""
    if not isinstance(expr, str) or not expr.strip() or len(expr) > MAX_CRON_CHARS:
        raise RuleError("cron", f"a cron expression of 1 to {MAX_CRON_CHARS} characters")
    e = " ".join(expr.split())
    if e.startswith("@"):
        if e.lower() not in ALIASES:
            raise RuleError("cron", f"unknown alias {e!r}; one of {', '.join(sorted(ALIASES))}")
        e = ALIASES[e.lower()]
    if len(e.split()) != 5:
        raise RuleError("cron", "5 fields (minute hour day-of-month month day-of-week) or an @alias")
    try:
        it = CronSim(e, datetime(2000, 1, 1, tzinfo=UTC))
        next(it)  # an expression that can never fire (e.g. 30 2 31 2 *) raises here
    except (CronSimError, StopIteration, ValueError) as exc:
        raise RuleError("cron", f"invalid cron expression: {exc}") from None
    return e


def zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        raise RuleError("timezone", "an IANA time zone name such as Europe/Berlin")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise RuleError("timezone", f"unknown IANA time zone {name!r}") from None


@dataclass(frozen=True)
class Rule:
    """A cron rule (``cron`` + ``timezone``) or an interval rule (``interval_seconds`` from ``anchor``)."""

    cron: str | None = None
    timezone: str = "UTC"
    interval_seconds: int | None = None
    anchor: datetime | None = None  # interval rules: fire times are anchor + k * interval, k >= 1

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.interval_seconds is None):
            raise RuleError("cron", "exactly one of cron and interval_seconds")
        if self.interval_seconds is not None:
            if not MIN_INTERVAL_SECONDS <= self.interval_seconds <= MAX_INTERVAL_SECONDS:
                raise RuleError(
                    "interval_seconds", f"from {MIN_INTERVAL_SECONDS} to {MAX_INTERVAL_SECONDS} seconds"
                )
            if self.anchor is None or self.anchor.tzinfo is None:
                raise RuleError("interval_seconds", "an interval rule needs an aware anchor time")


def _utc(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError("aware datetimes only")
    return t.astimezone(UTC)


def _interval_k(rule: Rule, t: datetime) -> int:
    """The number of interval fire times at or before ``t`` (k of the latest one; 0 when none)."""
    step_us = rule.interval_seconds * 1_000_000  # type: ignore[operator]  # an interval rule has these
    elapsed = (_utc(t) - _utc(rule.anchor)) // _US  # type: ignore[arg-type]  # as above
    return max(0, elapsed // step_us)


def _interval_at(rule: Rule, k: int) -> datetime:
    return _utc(rule.anchor) + timedelta(seconds=rule.interval_seconds * k)  # type: ignore[arg-type, operator]  # as above


def next_after(rule: Rule, t: datetime) -> datetime:
    """The first fire time strictly after ``t`` (UTC)."""
    t = _utc(t)
    if rule.interval_seconds is not None:
        return _interval_at(rule, _interval_k(rule, t) + 1)
    it = CronSim(rule.cron, t.astimezone(zone(rule.timezone)))  # type: ignore[arg-type]  # a cron rule has these
    for _ in range(MAX_STEPS):
        candidate = _utc(next(it))
        if candidate > t:
            return candidate
    raise RuleError("cron", "no fire time found after the given time")  # pragma: no cover - DST guard


def latest_at_or_before(rule: Rule, t: datetime) -> datetime | None:
    """The last fire time at or before ``t`` (None for an interval rule before its first)."""
    t = _utc(t)
    if rule.interval_seconds is not None:
        k = _interval_k(rule, t)
        return _interval_at(rule, k) if k >= 1 else None
    # cronsim strips the microseconds as its first reverse tick: the search starts at floor(t)
    it = CronSim(rule.cron, (t + _US).astimezone(zone(rule.timezone)), reverse=True)  # type: ignore[arg-type]  # as above
    for _ in range(MAX_STEPS):
        candidate = _utc(next(it))
        if candidate <= t:
            return candidate
    raise RuleError("cron", "no fire time found before the given time")  # pragma: no cover - DST guard


def upcoming(rule: Rule, after: datetime, n: int = 5) -> list[datetime]:
    """The next ``n`` (at most ``MAX_UPCOMING``) fire times strictly after ``after``."""
    out: list[datetime] = []
    t = after
    for _ in range(min(n, MAX_UPCOMING)):
        t = next_after(rule, t)
        out.append(t)
    return out


@dataclass(frozen=True)
class Due:
    """What a tick does for one schedule: launch ``fire_at`` (the latest due fire time), report
    ``skipped`` older due fire times coalesced into it (``capped``: at least that many), and wait for
    ``following`` (the first fire time after ``now``)."""

    fire_at: datetime
    skipped: int
    capped: bool
    following: datetime


def due(rule: Rule, next_fire: datetime, now: datetime) -> Due | None:
    """Coalesce the fire times in ``[next_fire, now]`` into one launch (X-SCHED: a missed period is
    launched once, not once per missed tick); None when ``next_fire`` is still in the future."""
    next_fire, now = _utc(next_fire), _utc(now)
    if next_fire > now:
        return None
    if rule.interval_seconds is not None:
        k_now = _interval_k(rule, now)
        k_first = max(1, _interval_k(rule, next_fire - _US) + 1)  # the first fire time >= next_fire
        latest = _interval_at(rule, max(k_now, k_first))
        skipped = max(0, k_now - k_first)
        return Due(latest, skipped, False, _interval_at(rule, k_now + 1))
    latest, skipped = next_fire, 0
    for _ in range(MAX_COUNTED):
        following = next_after(rule, latest)
        if following > now:
            return Due(latest, skipped, False, following)
        latest, skipped = following, skipped + 1
    last = latest_at_or_before(rule, now) or latest
    return Due(last, skipped, True, next_after(rule, now))


# --------------------------------------------------------------------------- what a fire does
LAUNCH = "LAUNCH"
CANCEL_THEN_LAUNCH = "CANCEL_THEN_LAUNCH"
SKIP_PAUSED = "PAUSED"
SKIP_OVERLAP = "OVERLAP"


def fire_decision(kind: str, paused: bool, overlap: str, unfinished: int) -> str:
    """What one ``schedule_launch`` does: a scheduled fire of a paused schedule is skipped; a manual
    launch ("launch now") always launches; otherwise the overlap policy with ``unfinished`` earlier
    instances of the schedule still running: ``skip`` skips, ``cancel_previous`` cancels them first,
    ``allow`` launches."""
    if kind == "MANUAL":
        return LAUNCH
    if paused:
        return SKIP_PAUSED
    if unfinished == 0 or overlap == "allow":
        return LAUNCH
    return CANCEL_THEN_LAUNCH if overlap == "cancel_previous" else SKIP_OVERLAP
