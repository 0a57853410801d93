"""The dispatch loop's phases (`flows/dispatch.py`), one type each: sending, waiting for
another run's probe, held by the budget, stopping; and how the loop ended."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sending:
    """Batches start while the window has room."""

    # Under a budget: the batch just started, not yet past its budget check. The next one
    # starts only after it, so that one held back is never overtaken by a later one (R9).
    checking: str | None = None
    budget_looked_again: bool = False  # a budget hold was already looked at again once


@dataclass(frozen=True)
class WaitingForProbe:
    """Another run's probe batch holds the upstream: look again at `until` (monotonic)."""

    until: float


@dataclass(frozen=True)
class HeldByBudget:
    """A batch could cross the month's budget: let those in flight settle at their real cost,
    look again once, then ask a person."""

    why: str
    looked_again: bool


@dataclass(frozen=True)
class Stopping:
    """Nothing more starts in this run: let those in flight end, then stop with `why`."""

    why: str


Phase = Sending | WaitingForProbe | HeldByBudget | Stopping


@dataclass(frozen=True)
class Finished:
    why_stopped: str | None  # None: the month's work is done, as far as this run can take it
