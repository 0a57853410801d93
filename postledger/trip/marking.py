"""The intent to pay, persisted before paying (R3): a batch marked running, or the outcome
that says why it may not start now (it stays queued, and nothing was paid).

On a Batch API a submission marks its batches in start order while its job has room, and
stops at the first that may not start (the breaker, the budget, a stop): it and every batch
after it stay queued (R9).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from postledger.guards.breaker import BreakerHeld
from postledger.guards.charges import BudgetHeld, quote_of
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchRecord, BatchStatus, JobBatch
from postledger.record.month_lease import MonthLost
from postledger.trip.keeping import Trip
from postledger.trip.outcome import BatchOutcome, HeldByBreaker, LedgerFailed, OverBudget, StopsRun
from postledger.upstreams import UpstreamNotConfigured, check_configured, request_bytes

# Room kept in a job's file for the next line before it is marked running (its size is known
# only then): its posts may be up to max_batch_chars characters, each up to 7 bytes once
# escaped twice (a control character in the posts' JSON, inside the line's JSON), under the
# prompt and the JSON around them.
_BYTES_PER_CHAR = 7
_LINE_OVERHEAD = 8192


def mark_sent(trip: Trip, batch_id: str) -> BatchRecord | BatchOutcome:
    """The batch marked running, its attempt counted and its possible charge booked (R3); or
    why it may not start now."""
    try:
        check_configured(trip.settings)  # a batch is never marked running for nothing
        started = trip.ledger.mark_running(batch_id, **_marking(trip))
    except (UpstreamNotConfigured, MonthLost) as exc:
        return StopsRun(batch_id, BatchStatus.QUEUED, "not sent", str(exc))
    except LedgerUnavailable as exc:  # no record, no call (R20)
        return LedgerFailed(batch_id, BatchStatus.QUEUED, str(exc))
    if isinstance(started, BreakerHeld):
        return HeldByBreaker(batch_id, started.reason)
    if isinstance(started, BudgetHeld):
        return OverBudget(batch_id, started.reason)
    return started.batch


def mark_for_job(
    trip: Trip, batch_ids: Sequence[str]
) -> tuple[list[JobBatch], BatchOutcome | None]:
    """Mark the batches running in start order while the job has room; stop at the first
    that may not start (it, and those after it, stay queued: nothing was paid). A chunk of
    them at a time, in one transaction each (`Ledger.mark_running_many`). The marked batches
    are returned as the trip holds them while their job runs: without their posts
    (`Ledger.job_batches`)."""
    wanted = batch_ids[: trip.port.facts.most_batches_per_job]
    room = _Room(trip)
    marked: list[str] = []
    not_started: BatchOutcome | None = None
    for start in range(0, len(wanted), MARK_CHUNK):
        chunk = wanted[start : start + MARK_CHUNK]
        started, not_started = _mark_chunk(trip, chunk, room)
        marked += [batch.batch_id for batch in started]
        if not_started is not None or len(started) < len(chunk):
            break
    return trip.ledger.job_batches(marked), not_started


# Batches marked in one transaction, at most.
MARK_CHUNK = 250


def _mark_chunk(
    trip: Trip, chunk: Sequence[str], room: _Room
) -> tuple[list[BatchRecord], BatchOutcome | None]:
    """What `mark_sent` does for each batch of the chunk, in one transaction; a failure of
    the transaction leaves the whole chunk queued, and is its first batch's outcome."""
    try:
        check_configured(trip.settings)  # a batch is never marked running for nothing
        started, held = trip.ledger.mark_running_many(chunk, **_marking(trip), room=room)
    except (UpstreamNotConfigured, MonthLost) as exc:
        return [], StopsRun(chunk[0], BatchStatus.QUEUED, "not sent", str(exc))
    except LedgerUnavailable as exc:  # no record, no call (R20)
        return [], LedgerFailed(chunk[0], BatchStatus.QUEUED, str(exc))
    if isinstance(held, BreakerHeld):
        return started, HeldByBreaker(chunk[len(started)], held.reason)
    if isinstance(held, BudgetHeld):
        return started, OverBudget(chunk[len(started)], held.reason)
    return started, None


def _marking(trip: Trip) -> dict[str, Any]:
    """What marking a batch running checks and books, from the trip's settings: its breaker,
    whether a resend can pay twice, the price and budget, the attempts cap, the run's claim."""
    settings = trip.settings
    return {
        "upstream": settings.breaker_name(),
        "idempotent": trip.port.facts.honours_keys,
        "pricing": trip.pricing,
        "max_cost": settings.max_cost,
        "holder": trip.holder,
        "max_attempts": settings.max_attempts,
    }


class _Room:
    """The room left in a job's file (`JobRoom`): the first batch always fits; each later one
    if the job's bytes so far, and room for its line at its largest, are within the limit."""

    def __init__(self, trip: Trip) -> None:
        self._trip = trip
        self._settings = settings = trip.settings
        self._most_bytes = trip.port.facts.most_bytes_per_job
        self._next_line = (
            _BYTES_PER_CHAR * settings.max_batch_chars
            + 2 * len(settings.analysis_in_use().request_text.encode())
            + _LINE_OVERHEAD
        )
        self._size = 0
        self._taken = 0

    def fits(self) -> bool:
        return not self._taken or self._size + self._next_line <= self._most_bytes

    def took(self, batch: BatchRecord) -> None:
        self._taken += 1
        self._size += request_bytes(self._settings, batch.batch_id, posts_of(batch))  # as sent
        self._trip.estimates[batch.batch_id] = quote_of(batch, self._trip.pricing).estimated


def posts_of(batch: BatchRecord) -> list[tuple[str, str]]:
    """The request the batch was first sent with (R35): its posts' ids and texts."""
    return [(post_id, text) for post_id, text in batch.request or []]
