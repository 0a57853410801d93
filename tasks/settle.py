"""What becomes of a batch once its upstream calls have ended, the same for a batch sent alone
and for each batch of a submission: a failure classified and decided (R11-R17), or the output
saved before it is checked (R4), then checked and its decision applied (R12, R13). Every write
goes to the ledger first and, if the ledger cannot take it, to the spill file (R20)."""

from __future__ import annotations

from dataclasses import dataclass
from logging import Logger, LoggerAdapter
from typing import Any

from postledger.failures.classify import failure_of
from postledger.failures.policy import Failure, after_failure
from postledger.guards.breaker import BreakerHeld
from postledger.guards.charges import BudgetHeld
from postledger.guards.spill import SpillKind, spill_for
from postledger.ledger import Ledger
from postledger.record.crash import CrashPoint, crash_point
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchRecord, BatchStatus, utcnow
from postledger.record.month_lease import MonthLost
from postledger.recovery.interrupted import finish_from_output
from postledger.settings import Settings
from postledger.upstreams import UpstreamNotConfigured, check_configured
from postledger.upstreams.calls import TaskSnapshot
from postledger.upstreams.errors import TaskFailed, TransportError, UpstreamError
from tasks.outcome import (
    BatchOutcome,
    HeldByBreaker,
    LedgerFailed,
    OverBudget,
    StopsRun,
    outcome_of,
)

RunLogger = Logger | LoggerAdapter[Any]


@dataclass
class Trip:
    """One batch's way through its upstream calls: what the ledger could not take on the way
    (the batch goes on regardless: it is paid for)."""

    ledger: Ledger
    batch: BatchRecord
    settings: Settings
    logger: RunLogger
    ledger_failure: str | None = None

    @property
    def batch_id(self) -> str:
        return self.batch.batch_id


def mark_sent(
    ledger: Ledger, batch_id: str, settings: Settings, holder: str | None
) -> BatchRecord | BatchOutcome:
    """Persist the intent to pay before paying (R3): the batch marked running, or the outcome
    that says why it may not start now (it stays queued, nothing was paid)."""
    try:
        check_configured(settings)  # a batch is never marked running for nothing
        batch, _ = ledger.mark_running(
            batch_id,
            settings.breaker_name(),
            idempotent=settings.honours_keys(),
            price=settings.price(),
            prompt=settings.prompt,
            max_cost=settings.max_cost,
            holder=holder,
            max_attempts=settings.max_attempts,
        )
    except (UpstreamNotConfigured, MonthLost) as exc:
        return StopsRun(batch_id, BatchStatus.QUEUED, "not sent", str(exc))
    except BreakerHeld as exc:
        return HeldByBreaker(batch_id, str(exc))
    except BudgetHeld as exc:
        return OverBudget(batch_id, str(exc))
    except LedgerUnavailable as exc:  # no record, no call (R20)
        return LedgerFailed(batch_id, BatchStatus.QUEUED, str(exc))
    return batch


def failure_of_snapshot(snapshot: TaskSnapshot) -> TaskFailed:
    """An ended upstream task (or a submission's line) with no output, as the error it is."""
    return TaskFailed(
        f"the upstream task ended {snapshot.status}: {snapshot.error or 'no output'}",
        billed=snapshot.billed,
    )


def settle_failure(trip: Trip, exc: UpstreamError, *, upstream: str | None) -> BatchOutcome:
    """The failure classified, and the business decision on it applied. With `upstream`, the
    decision also tells that upstream's breaker (R18)."""
    settings, ledger, batch_id = trip.settings, trip.ledger, trip.batch_id
    failure: Failure = failure_of(exc)
    trip.logger.warning("%s: %s (%s)", batch_id, failure.reason, failure.kind)
    if isinstance(exc, TransportError) and exc.maybe_sent:
        count_gateway_retries(trip, exc.gateway_retries)
    decision = after_failure(
        ledger.batch(batch_id),
        ledger.posts_of(batch_id),  # as they are now: one may have changed since
        failure,
        idempotent=settings.honours_keys(),
        limits=settings.limits(),
        now=utcnow(),
    )
    ledger.apply(batch_id, decision, upstream=upstream)
    return outcome_of(batch_id, decision, trip.ledger_failure)


def settle_output(trip: Trip, snapshot: TaskSnapshot, task_id: str | None) -> BatchOutcome:
    """The delivered output saved (or spilled), checked, and its decision applied."""
    settings, ledger, batch_id = trip.settings, trip.ledger, trip.batch_id
    crash_point(CrashPoint.AFTER_OUTPUT)
    assert snapshot.output is not None
    try:
        ledger.save_output(batch_id, snapshot.output, snapshot.usage, settings.price())
    except LedgerUnavailable as exc:
        # R20: paid for and delivered; the next run imports it instead of paying again.
        spill_for(settings, batch_id).add(
            SpillKind.OUTPUT,
            batch_id,
            task_id=task_id,
            output=snapshot.output,
            usage=snapshot.usage,
        )
        trip.logger.error("%s: output kept in the spill file: %s", batch_id, exc)
        return LedgerFailed(batch_id, BatchStatus.RUNNING, str(exc))

    crash_point(CrashPoint.DURING_VALIDATION)
    try:
        decision = finish_from_output(ledger, batch_id, settings.limits(), settings.breaker_name())
    except LedgerUnavailable as exc:  # the output is saved: the next run validates it (R21)
        return LedgerFailed(batch_id, BatchStatus.RECEIVED, str(exc))
    crash_point(CrashPoint.AFTER_COMPLETED)
    trip.logger.info("%s: %s", batch_id, decision.why)
    return outcome_of(batch_id, decision, trip.ledger_failure)


def save_task_id(trip: Trip, task_id: str, adopted: str | None = None) -> None:
    """R23, R20: the paid task's id in the ledger, or else in the spill file (and no new batch
    starts); if neither can be written, `SpillFailed` says the id out loud."""
    try:
        trip.ledger.record_task_id(trip.batch_id, task_id, adopted=adopted)
    except LedgerUnavailable as exc:
        spill_for(trip.settings, trip.batch_id).add(
            SpillKind.TASK_ID, trip.batch_id, task_id=task_id
        )
        trip.logger.error("%s: task id %s kept in the spill file: %s", trip.batch_id, task_id, exc)
        trip.ledger_failure = trip.ledger_failure or str(exc)


def count_gateway_retries(trip: Trip, retries: int) -> None:
    if retries <= 0:
        return
    trip.logger.warning(
        "%s: the gateway retried the request %dx on its own: each may have been charged",
        trip.batch_id,
        retries,
    )
    trip.ledger.count_gateway_retries(
        trip.batch_id, retries, price=trip.settings.price(), prompt=trip.settings.prompt
    )
