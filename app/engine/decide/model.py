"""The snapshot the decisions read and the effects they return: plain frozen values, no database,
no clock (times the decisions need are compared by the database while the snapshot is loaded and
arrive here as booleans such as ``past_deadline``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Inst:
    id: str
    state: str
    paused: bool = False
    cancel_requested: bool = False
    stop_requested: bool = False
    stop_kind: str | None = None
    compensation: dict[str, Any] | None = None
    control_revision: int = 1


@dataclass(frozen=True)
class Step:
    key: str
    kind: str
    state: str
    after: tuple[str, ...] = ()
    activation_id: str | None = None
    activation_sequence: int = 0
    task_attempts: int = 0


@dataclass(frozen=True)
class Snapshot:
    inst: Inst
    steps: tuple[Step, ...] = ()

    def step(self, key: str) -> Step | None:
        return next((s for s in self.steps if s.key == key), None)


@dataclass(frozen=True)
class Poll:
    """A POLL activation's bookkeeping (W-STEP-3), with the database's view of its deadline."""

    used_rounds: int
    round_attempts: int
    current_task: str | None = None
    past_deadline: bool = False


# ----------------------------------------------------------------------------------------- effects
@dataclass(frozen=True)
class Activate:
    """Activate these BLOCKED steps (dependencies succeeded), then offer early signals to them."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class Skip:
    """These BLOCKED steps end SKIPPED without running: ``items`` are ``(key, code, message)``, code
    ``CONDITION_FALSE`` or ``DEPENDENCIES_SKIPPED`` (the skip rule: ``decide/progress.py``)."""

    items: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class Finish:
    """Every step succeeded: the instance ends SUCCEEDED with its output mapping."""


@dataclass(frozen=True)
class SetProgress:
    """RUNNING / WAITING recomputed from the steps (``state`` None: unchanged, revision + 1)."""

    state: str | None


@dataclass(frozen=True)
class SettleCancel:
    """A cancel is pending: settle it (in-flight tasks, then compensations, then CANCELLED)."""


@dataclass(frozen=True)
class Ignore:
    """Nothing to do (not the current activation, already settled, not due)."""

    reason: str


@dataclass(frozen=True)
class CompleteStep:
    output: Any


@dataclass(frozen=True)
class FailStep:
    error: dict[str, Any]


@dataclass(frozen=True)
class RetryTask:
    """The next task attempt of the step: now (``delay`` 0) or after ``delay`` seconds (the step WAITS)."""

    attempt: int
    delay: int


@dataclass(frozen=True)
class Collect:
    """An in-flight task ended during a cancel: its step records ``state`` (None: it is not the
    step's current activation, nothing to record); nothing new starts."""

    state: str | None
    output: Any = None


@dataclass(frozen=True)
class PollRetry:
    """Another attempt within the current round."""


@dataclass(frozen=True)
class PollNextRound:
    """The round is used up; round ``round`` starts after the interval (the step WAITS)."""

    used: int
    round: int


@dataclass(frozen=True)
class PollFail:
    used: int
    error: dict[str, Any]


@dataclass(frozen=True)
class Stop:
    """The instance stops without success: ``state`` FAILED / CANCELLED, after its compensations."""

    state: str
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class WaitInFlight:
    """A cancel waits for claimed tasks to end (or their leases to pass)."""


@dataclass(frozen=True)
class Compensate:
    """Issue compensation ``index`` of ``plan`` (a ``compensation_action`` job)."""

    comp: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CompensationFailed:
    comp: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class End:
    """The instance ends now in ``state`` (the compensation chain is done or abandoned)."""

    state: str
    comp: dict[str, Any] | None = None


@dataclass(frozen=True)
class Refuse:
    """A request that the current state does not allow (409 STATE_CONFLICT with this message)."""

    message: str


@dataclass(frozen=True)
class Pause:
    pass


@dataclass(frozen=True)
class Resume:
    pass


@dataclass(frozen=True)
class Cancel:
    pass


@dataclass(frozen=True)
class Consume:
    """A signal wins its wait: the step succeeds with the payload."""


@dataclass(frozen=True)
class Reject:
    disposition: str
