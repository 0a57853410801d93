"""A breaker's state in the ledger, changed in a write transaction that holds the breakers'
lock: a batch's outcome counted (`apply_signal`), and whether a batch may start now
(`breaker_holds`). The rules it applies are in `breaker.py`."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_
from sqlmodel import Session, col, select

from postledger.guards.breaker import BreakerHeld, Signal, level_after
from postledger.record.claims import STALE
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    BreakerLevel,
    BreakerRecord,
    MonthRunRecord,
    utcnow,
)
from postledger.record.states import move_breaker


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


def breaker_holds(session: Session, upstream: str, batch: BatchRecord) -> BreakerHeld | None:
    """Why the breaker does not let `batch` start now; None when it does.

    In probe, one batch of the upstream at a time, across every month and run (R18): the one
    sent since the breaker went to probe by a run that still holds its month. (A batch left
    running by a dead run is interrupted, not in flight: its outcome is for recovery.)"""
    breaker = breaker_for_update(session, upstream)
    if breaker.level is BreakerLevel.OPEN:
        return BreakerHeld(f"the breaker of {upstream} is open: {breaker.reason}")
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
            return BreakerHeld(f"the breaker of {upstream} is probing with {probing}")
    return None
