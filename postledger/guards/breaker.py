"""The circuit breaker (R18, R19): when the upstream keeps failing, stop starting paid work.

The rules are plain functions; the state lives in the ledger (one `BreakerRecord` per upstream,
shared by every month and every run), so a restart finds it as it was. Only a batch's *final*
transport failure counts — request retries inside a batch never do.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import and_
from sqlmodel import Session, col, select

from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    BreakerLevel,
    BreakerRecord,
    MonthRunRecord,
    utcnow,
)
from postledger.record.month_lease import STALE
from postledger.record.states import move_breaker


class Signal(StrEnum):
    """What a finished batch tells the breaker of its upstream."""

    SUCCESS = "success"  # the upstream delivered an output
    TRANSPORT_FAILURE = "transport_failure"  # request retries exhausted (R18)


class BreakerHeld(RuntimeError):
    """The breaker does not let this batch start now; it stays queued and nothing was paid."""


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


# --- in a write transaction that holds the breakers' lock ---------------------------------


def breaker_for_update(session: Session, upstream: str) -> BreakerRecord:
    breaker = session.get(BreakerRecord, upstream)
    if breaker is None:
        breaker = BreakerRecord(upstream=upstream)
        session.add(breaker)
    return breaker


def apply_signal(
    session: Session,
    upstream: str,
    signal: Signal,
    why: str,
    *,
    month: str,
    sent_at: datetime | None = None,
) -> BreakerRecord:
    """Count a batch's outcome. A success of a batch sent before the breaker last changed is
    old news — the probe is the batch sent *in* probe — so it neither closes the breaker nor
    breaks a run of failures."""
    breaker = breaker_for_update(session, upstream)
    if signal is Signal.SUCCESS and sent_at is not None and sent_at < breaker.changed_at:
        return breaker
    breaker.failures = breaker.failures + 1 if signal is Signal.TRANSPORT_FAILURE else 0
    target = level_after(breaker.level, signal)
    if target is not breaker.level:
        count = f" ({breaker.failures} in a row)" if breaker.failures else ""
        move_breaker(session, breaker, target, f"{why}{count}", month=month)
    session.add(breaker)
    return breaker


def check_may_start(session: Session, upstream: str, batch: BatchRecord) -> None:
    """Raise `BreakerHeld` unless the breaker lets `batch` start now.

    In probe, one batch of the upstream at a time, across every month and run (R18): the one
    sent since the breaker went to probe by a run that still holds its month. (A batch left
    running by a dead run is interrupted, not in flight: its outcome is for recovery.)"""
    breaker = breaker_for_update(session, upstream)
    if breaker.level is BreakerLevel.OPEN:
        raise BreakerHeld(f"the breaker of {upstream} is open: {breaker.reason}")
    if breaker.level is BreakerLevel.PROBE:
        live_run = and_(
            col(MonthRunRecord.month) == col(BatchRecord.month),
            col(MonthRunRecord.holder) == col(BatchRecord.sent_by),
        )
        probing = session.exec(
            select(BatchRecord.batch_id)
            .join(MonthRunRecord, live_run)
            .where(
                BatchRecord.status == BatchStatus.RUNNING,
                BatchRecord.upstream == upstream,
                BatchRecord.batch_id != batch.batch_id,
                col(BatchRecord.started_at) >= breaker.changed_at,
                col(MonthRunRecord.heartbeat_at) >= utcnow() - STALE,
            )
        ).first()
        if probing is not None:
            raise BreakerHeld(f"the breaker of {upstream} is probing with {probing}")
