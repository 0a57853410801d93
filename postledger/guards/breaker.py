"""The circuit breaker (R18, R19): when the upstream keeps failing, stop starting paid work.

The rules are plain functions here; the state lives in the ledger (`breaker_state.py`: one
`BreakerRecord` per upstream, shared by every month and every run), so a restart finds it as it
was. Only a batch's *final* transport failure counts — request retries inside a batch never do.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from postledger.record.kinds import BreakerLevel


class Signal(StrEnum):
    """What a finished batch tells the breaker of its upstream."""

    SUCCESS = "success"  # the upstream delivered an output
    TRANSPORT_FAILURE = "transport_failure"  # request retries exhausted (R18)


# Why a breaker is open, in the words of `level_after`: the second final transport failure in a
# row (the first put it in probe).
OPENED_BECAUSE = (
    "Batches failed at the transport level twice in a row, after their request retries."
)


@dataclass(frozen=True)
class BreakerHeld:
    """The breaker does not let this batch start now; it stays queued and nothing was paid.
    A value, not an error: holding a batch is the breaker doing its job."""

    reason: str


def level_after(level: BreakerLevel, signal: Signal) -> BreakerLevel:
    """normal -> probe -> open on failures; a success in probe closes the breaker again.
    Open stays open whatever arrives late: only a person continues (R19)."""
    if signal is Signal.TRANSPORT_FAILURE:
        return BreakerLevel.PROBE if level is BreakerLevel.NORMAL else BreakerLevel.OPEN
    return BreakerLevel.NORMAL if level is BreakerLevel.PROBE else level


def window(level: BreakerLevel, max_in_flight: int) -> int:
    """How many batches may be in flight at this level."""
    return {BreakerLevel.NORMAL: max_in_flight, BreakerLevel.PROBE: 1, BreakerLevel.OPEN: 0}[level]


def advice(level: BreakerLevel, month: str | None = None) -> str:
    """What to do at `level`; `month`: the month whose run waits (or last tripped it)."""
    if level is BreakerLevel.OPEN:
        answer = (
            f"`postledger approve --month {month} [--note TEXT]`"
            if month
            else "`postledger approve --month <the month to run> [--note TEXT]`"
        )
        return (
            "nothing new is sent. Check the upstream, then continue: in the Prefect UI (Resume "
            f"on the paused run) or {answer}; the next batches then run one at a time first"
        )
    if level is BreakerLevel.PROBE:
        return "one batch at a time; the next success returns to normal"
    return "nothing to do"
