"""What becomes of a batch once its upstream calls have spoken, the same for a batch sent
alone and for each batch of a submission:

- an output is saved (or spilled) before it is checked (R4), then checked and decided (R12,
  R13);
- the upstream's "failed" or "unknown id" is decided by the rules (R15, R26), the usage a
  failed answer reported booked as it is (R51);
- no verdict leaves the batch `running` with its id, for the next look (R48);
- a create that failed is classified and decided (R10, R11, R14, R17, R24).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from postledger.failures.classify import failure_of
from postledger.failures.policy import Decision, Reach, after_failure
from postledger.failures.verdicts import after_no_verdict, after_unknown, after_upstream_failed
from postledger.record.crash import CrashPoint, crash_point
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchStatus, SentBatch, utcnow
from postledger.record.month_lease import MonthLost
from postledger.recovery.interrupted import finish_from_output
from postledger.trip.keeping import Trip
from postledger.trip.outcome import BatchOutcome, LedgerFailed, outcome_of
from postledger.upstreams.calls import Delivered, NoVerdict, Unknown, UpstreamFailed, Verdict
from postledger.upstreams.errors import UpstreamError


def settle(
    trip: Trip,
    batch: SentBatch,
    seen: Verdict | NoVerdict,
    task_id: str | None,
    *,
    tell_breaker: bool = True,
) -> BatchOutcome:
    """The batch settled from what its upstream work came to. `tell_breaker` False: the
    breaker has heard of this job's failure already (it counts once per job, not per line)."""
    if isinstance(seen, Delivered):
        return settle_output(trip, batch, seen, task_id)
    limits, ledger = trip.settings.limits(), trip.ledger
    usage = None
    if isinstance(seen, UpstreamFailed):
        trip.log.warning("%s: %s", batch.batch_id, seen.reason)
        decision = after_upstream_failed(ledger.posts_of(batch.batch_id), seen, limits)
        usage = seen.usage if seen.billed else None
    elif isinstance(seen, Unknown):
        trip.log.warning("%s: %s", batch.batch_id, seen.reason)
        decision = after_unknown(ledger.posts_of(batch.batch_id), seen, task_id or "?")
    else:
        trip.log.warning("%s: no verdict: %s", batch.batch_id, seen.detail)
        decision = after_no_verdict(seen, task_id)
    if not tell_breaker:
        decision = replace(decision, signal=None)
    return _applied(trip, batch, decision, usage=usage)


def settle_output(
    trip: Trip, batch: SentBatch, delivered: Delivered, task_id: str | None
) -> BatchOutcome:
    """The delivered output saved (or spilled), checked, and its decision applied."""
    crash_point(CrashPoint.AFTER_OUTPUT)
    if not trip.keep_output(batch.batch_id, task_id, delivered.output, delivered.usage):
        return LedgerFailed(batch.batch_id, BatchStatus.RUNNING, trip.ledger_failure or "")
    crash_point(CrashPoint.DURING_VALIDATION)
    try:
        decision = finish_from_output(
            trip.ledger,
            batch.batch_id,
            trip.settings.analysis_in_use(),
            trip.settings.limits(),
            trip.settings.breaker_name(),
            holder=trip.holder,
        )
    except LedgerUnavailable as exc:  # the output is saved: the next run checks it (R21)
        trip.failed_to_write(exc)
        return LedgerFailed(batch.batch_id, BatchStatus.RECEIVED, str(exc))
    crash_point(CrashPoint.AFTER_COMPLETED)
    trip.log.info("%s: %s", batch.batch_id, decision.why)
    return outcome_of(batch.batch_id, decision, trip.ledger_failure)


def settle_outputs(
    trip: Trip, lines: Sequence[tuple[SentBatch, Delivered]], task_id: str | None
) -> dict[str, BatchOutcome] | None:
    """A chunk of a job's delivered lines settled as `settle_output` settles one, in two
    transactions: every output of the chunk saved (R4), then each checked and its decision
    applied. None: the ledger failed and saved nothing of the chunk; the caller settles its
    lines one at a time (each output saved, or else spilled). A month lost to another run
    before the outputs were saved: they are spilled for it, and `MonthLost` raised."""
    settings = trip.settings
    crash_point(CrashPoint.AFTER_OUTPUT)
    outputs = [(batch.batch_id, line.output, line.usage) for batch, line in lines]
    try:
        trip.ledger.save_outputs(outputs, settings.price_book(), holder=trip.holder)
    except LedgerUnavailable as exc:
        trip.log.error("%d outputs: the ledger could not be written: %s", len(lines), exc)
        return None
    except MonthLost as exc:
        for batch, line in lines:  # paid for and delivered: the next run imports them
            trip.spill_output(batch.batch_id, task_id, line)
        trip.log.error("%d outputs kept in the spill file: %s", len(lines), exc)
        trip.lost = trip.lost or exc
        raise
    crash_point(CrashPoint.DURING_VALIDATION)  # every output of the chunk saved, none decided
    batch_ids = [batch.batch_id for batch, _ in lines]
    try:
        decisions = trip.ledger.finish_outputs(
            batch_ids,
            settings.analysis_in_use(),
            settings.limits(),
            settings.breaker_name(),
            holder=trip.holder,
        )
    except LedgerUnavailable as exc:  # the outputs are saved: the next run checks them (R21)
        trip.failed_to_write(exc)
        return {b: LedgerFailed(b, BatchStatus.RECEIVED, str(exc)) for b in batch_ids}
    crash_point(CrashPoint.AFTER_COMPLETED)
    outcomes: dict[str, BatchOutcome] = {}
    for batch_id, decision in zip(batch_ids, decisions, strict=True):
        trip.log.info("%s: %s", batch_id, decision.why)
        outcomes[batch_id] = outcome_of(batch_id, decision, trip.ledger_failure)
    return outcomes


def settle_create_failure(
    trip: Trip, batch: SentBatch, exc: UpstreamError, *, tell_breaker: bool = True
) -> BatchOutcome:
    """A create that failed, classified, and the business decision on it applied."""
    ledger = trip.ledger
    now = ledger.batch(batch.batch_id)
    failure = failure_of(exc)
    if (
        failure.reach is Reach.NEVER
        and now.request_retries > batch.request_retries
        and trip.port.facts.honours_keys
    ):
        # The request was retried under its key after a fault, which may have come after an
        # earlier attempt made the work: this refusal says nothing about that one. The same
        # key again is the way on (it cannot pay twice); giving the attempt back is not.
        failure = replace(failure, reach=Reach.MAYBE)
    trip.log.warning("%s: %s (%s)", batch.batch_id, failure.reason, failure.kind)
    decision = after_failure(
        now,
        ledger.posts_of(batch.batch_id),  # as they are now: one may have changed since
        failure,
        idempotent=trip.port.facts.honours_keys,
        limits=trip.settings.limits(),
        now=utcnow(),
    )
    if not tell_breaker:
        decision = replace(decision, signal=None)
    return _applied(trip, batch, decision)


def _applied(
    trip: Trip, batch: SentBatch, decision: Decision, *, usage: dict[str, Any] | None = None
) -> BatchOutcome:
    try:
        trip.ledger.apply(
            batch.batch_id,
            decision,
            upstream=trip.settings.breaker_name(),
            usage=usage,
            prices=trip.settings.price_book(),
            holder=trip.holder,
        )
    except (LedgerUnavailable, MonthLost):
        # The decision is made again from the next look; what the upstream reported it
        # used may not be told again (it may forget the task): kept in the spill.
        if usage is not None:
            trip.spill_usage(batch.batch_id, usage)
        raise
    return outcome_of(batch.batch_id, decision, trip.ledger_failure)
