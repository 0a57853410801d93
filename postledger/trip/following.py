"""Following paid work until the upstream gives its verdict on each batch it carries.

Only the upstream's verdict ends a paid batch (R48). A look that gives no verdict (a
transport fault after the request retries, a body that is not the answer, results that are
cut or lack a batch's line, a refused read) is looked at again after a backoff, for as long
as our deadline allows (a Batch API: its whole completion window); a batch with no verdict by
then stays `running` with its id, and the next run looks again. Each batch is settled the
moment its verdict is read, so a job's answered lines are saved while its others are read
again. The breaker hears of a job's lack of verdict once, not once per line (R18).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from postledger.failures.verdicts import worth_looking_again
from postledger.guards.spill import SpillFailed
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchStatus, SentBatch
from postledger.record.month_lease import MonthLost
from postledger.trip.keeping import Trip
from postledger.trip.outcome import BatchOutcome, LedgerFailed
from postledger.trip.settle import settle, settle_outputs
from postledger.upstreams.calls import (
    Delivered,
    JobEnded,
    JobLook,
    Look,
    NoVerdict,
    NoVerdictReason,
    Running,
    Unknown,
    UpstreamFailed,
)

# Look at this batch's (or job's) work for at most this many seconds: its batches' ids.
LookFor = Callable[[Sequence[str], float], Awaitable[JobLook]]

# The longest wait between two looks that gave no verdict.
MOST_BACKOFF = 300.0


class Backoff:
    """The waits between looks that gave no verdict: from `first`, doubling up to
    `MOST_BACKOFF`; a wait the upstream asked for (a rate limit) is honoured up to `longest`."""

    def __init__(self, first: float, longest: float) -> None:
        self._next = max(first, 0.05)
        self._longest = longest

    def after(self, no_verdict: NoVerdict) -> float:
        wait = self._next
        self._next = min(self._next * 2, MOST_BACKOFF)
        if no_verdict.retry_after is not None:
            wait = max(wait, min(no_verdict.retry_after, self._longest))
        return wait


def job_look_of(batch_id: str, look: Look) -> JobLook:
    """A look at one batch's own task, as a look at a job that carries that batch alone."""
    if isinstance(look, Running | Unknown | NoVerdict):
        return look
    return JobEnded({batch_id: look})


async def follow(
    trip: Trip,
    batches: Sequence[SentBatch],
    task_id: str,
    look: LookFor,
    outcomes: dict[str, BatchOutcome],
) -> None:
    """Settle each batch from its verdict as it comes, into `outcomes`; those with no verdict
    by our deadline are settled as uncertain (still running, their id kept)."""
    clock, settings = trip.clock, trip.settings
    pending = {batch.batch_id: batch for batch in batches if batch.batch_id not in outcomes}
    deadline = trip.port.facts.wait_deadline
    give_up = clock.monotonic() + deadline
    backoff = Backoff(settings.request_backoff, settings.rate_limit_max_wait)
    problem: NoVerdict | None = None
    while pending and (remaining := give_up - clock.monotonic()) > 0:
        seen = await look(list(pending), _look_for(trip, remaining))
        if isinstance(seen, Running):
            problem = None  # the upstream answers: a later lack of verdict is our deadline
            if seen.counts is not None:  # a job's own counts: kept to be shown, nothing more
                month = next(iter(pending.values())).month
                trip.keep_job_counts(month, task_id, seen.counts)
            continue
        if isinstance(seen, Unknown):
            for batch in pending.values():
                outcomes[batch.batch_id] = _settled(trip, batch, seen, task_id)
            return
        if isinstance(seen, JobEnded):
            unread = _settle_ended(trip, pending, seen, task_id, outcomes)
            pending = {b: batch for b, batch in pending.items() if b not in outcomes}
            if not pending:
                return
            seen = unread or _missing(list(pending))
        problem = seen
        if not worth_looking_again(seen):
            break
        trip.log.warning(
            "%s: no verdict yet (%s); looking again: %s",
            task_id,
            seen.reason.value,
            seen.detail,
        )
        await clock.sleep(min(backoff.after(seen), max(give_up - clock.monotonic(), 0.0)))
    last = problem or NoVerdict(
        NoVerdictReason.DEADLINE,
        f"still running upstream after {deadline:g} s, our deadline",
    )
    for nth, batch in enumerate(pending.values()):
        outcomes[batch.batch_id] = _settled(trip, batch, last, task_id, tell_breaker=nth == 0)


def _settle_ended(
    trip: Trip,
    pending: dict[str, SentBatch],
    ended: JobEnded,
    task_id: str,
    outcomes: dict[str, BatchOutcome],
) -> NoVerdict | None:
    """Each batch whose line holds a verdict settled from it, in the job's order, each line
    read as it comes (a job's results are not held whole): a run of delivered lines a chunk
    at a time (`settle_outputs`), any other line alone. Returns the first line that gave no
    verdict, if any. If the month was lost to another run on the way, the outputs read and
    not yet saved are spilled for it."""
    lines = ((b, ended.lines[b]) for b in ended.lines if b in pending)
    unread: NoVerdict | None = None
    delivered: list[tuple[SentBatch, Delivered]] = []
    try:
        for batch_id, line in lines:
            if isinstance(line, Delivered):
                delivered.append((pending[batch_id], line))
                if len(delivered) == SETTLE_CHUNK:
                    _settle_delivered(trip, delivered, task_id, outcomes)
                    delivered = []
                continue
            _settle_delivered(trip, delivered, task_id, outcomes)
            delivered = []
            if isinstance(line, NoVerdict):
                unread = unread or line
            else:
                outcomes[batch_id] = _settled(trip, pending[batch_id], line, task_id)
        _settle_delivered(trip, delivered, task_id, outcomes)
    except MonthLost:  # the outputs being settled are saved or spilled by the step itself
        for later_id, later in lines:
            if isinstance(later, Delivered):
                trip.spill_output(later_id, task_id, later)
        raise
    return unread


def _settle_delivered(
    trip: Trip,
    delivered: list[tuple[SentBatch, Delivered]],
    task_id: str,
    outcomes: dict[str, BatchOutcome],
) -> None:
    """A run of delivered lines: together from `BULK_FROM` lines on, else one at a time."""
    if len(delivered) >= BULK_FROM:
        outcomes.update(_settled_chunk(trip, delivered, task_id))
        return
    for batch, line in delivered:
        outcomes[batch.batch_id] = _settled(trip, batch, line, task_id)


# Delivered lines settled together, at most; fewer than BULK_FROM in a row, one at a time.
SETTLE_CHUNK = 250
BULK_FROM = 2


def _settled_chunk(
    trip: Trip, chunk: list[tuple[SentBatch, Delivered]], task_id: str
) -> dict[str, BatchOutcome]:
    """A chunk of delivered lines settled together; if the ledger failed before any of
    their outputs was saved, one at a time (each saved, or else spilled, R20)."""
    settled = settle_outputs(trip, chunk, task_id)
    if settled is not None:
        return settled
    outcomes: dict[str, BatchOutcome] = {}
    for index, (batch, line) in enumerate(chunk):
        try:
            outcomes[batch.batch_id] = _settled(trip, batch, line, task_id)
        except MonthLost:  # its own output is spilled; so are the rest of the chunk's
            for later, later_line in chunk[index + 1 :]:
                trip.spill_output(later.batch_id, task_id, later_line)
            raise
    return outcomes


def _settled(
    trip: Trip,
    batch: SentBatch,
    seen: Unknown | NoVerdict | Delivered | UpstreamFailed,
    task_id: str,
    *,
    tell_breaker: bool = True,
) -> BatchOutcome:
    """One batch settled; a ledger or spill write that failed on the way is that batch's
    outcome (it stops new work), and the job's other batches are settled still."""
    try:
        return settle(trip, batch, seen, task_id, tell_breaker=tell_breaker)
    except (LedgerUnavailable, SpillFailed) as exc:
        if isinstance(exc, SpillFailed):
            trip.log.critical("%s: %s", batch.batch_id, exc)
        else:
            trip.log.error("%s: the ledger could not be written: %s", batch.batch_id, exc)
        trip.failed_to_write(exc)
        return LedgerFailed(batch.batch_id, BatchStatus.RUNNING, str(exc))


def _missing(batch_ids: list[str]) -> NoVerdict:
    return NoVerdict(
        NoVerdictReason.RESULTS_INCOMPLETE,
        f"the job's results have no line for {len(batch_ids)} of its batches",
    )


def _look_for(trip: Trip, remaining: float) -> float:
    """How long one look may wait: a job (Batch API) for at most `progress_every` seconds, so
    that its counts are kept at least that often while it runs (a look returns `Running`
    when its time is up); a task, until our deadline."""
    if trip.port.facts.carries_many:
        return min(remaining, trip.settings.progress_every)
    return remaining
