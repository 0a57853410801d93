"""One batch's trip: marked running (R3), its upstream work made and its id kept at once
(R23), followed until the upstream's verdict, its output saved before it is checked (R4),
and the business decision applied. Every step is written to the ledger before the next
starts, so a crash anywhere leaves a record to recover from.

queued -> running -> task id kept -> output received -> checked -> completed (or retried,
split, failed with a reason); or running, uncertain, when no verdict came (R48).
"""

from __future__ import annotations

from postledger.guards.spill import SpillFailed
from postledger.record.crash import CrashPoint, crash_point
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchRecord, BatchStatus
from postledger.record.month_lease import MonthLost
from postledger.record.reads import LedgerError
from postledger.trip.following import follow, job_look_of
from postledger.trip.keeping import Trip
from postledger.trip.marking import mark_sent, posts_of
from postledger.trip.outcome import BatchOutcome, LedgerFailed, StopsRun
from postledger.trip.settle import settle, settle_create_failure
from postledger.upstreams.calls import Found, JobLook
from postledger.upstreams.errors import AmbiguousCreate, UpstreamError


async def run_batch(trip: Trip, batch_id: str, *, resume: bool = False) -> BatchOutcome:
    """Send the batch and see it through. With `resume`, the batch was sent by an earlier,
    interrupted run and its upstream task id is saved: follow that task, send nothing (R23)."""
    try:
        return await _run(trip, batch_id, resume)
    except MonthLost as exc:
        return month_lost(trip, batch_id, exc)
    except LedgerUnavailable as exc:
        trip.log.error("%s: the ledger could not be written: %s", batch_id, exc)
        return LedgerFailed(batch_id, BatchStatus.RUNNING, str(exc))
    except SpillFailed as exc:
        trip.log.critical("%s: %s", batch_id, exc)
        return LedgerFailed(batch_id, BatchStatus.RUNNING, str(exc))


def month_lost(trip: Trip, batch_id: str, exc: MonthLost) -> StopsRun:
    """This run lost its month to another while the batch was out: the other run settles it
    (what this one learned is in the spill file), and this one starts nothing more."""
    trip.log.error("%s: %s", batch_id, exc)
    return StopsRun(batch_id, BatchStatus.RUNNING, "left to the run that holds the month", str(exc))


async def _run(trip: Trip, batch_id: str, resume: bool) -> BatchOutcome:
    if resume:
        batch = trip.ledger.batch(batch_id)
        if batch.upstream_task_id is None:
            raise LedgerError(f"batch {batch_id} has no task id to poll")
        task_id = batch.upstream_task_id
    else:
        marked = mark_sent(trip, batch_id)
        if not isinstance(marked, BatchRecord):
            return marked
        batch = marked
        crash_point(CrashPoint.AFTER_RUNNING)
        made = await _create(trip, batch)
        if not isinstance(made, str):
            return made
        task_id = made
    outcomes: dict[str, BatchOutcome] = {}

    async def look(_batch_ids: object, seconds: float) -> JobLook:
        return job_look_of(batch_id, await trip.port.wait(batch_id, task_id, seconds))

    await follow(trip, [batch], task_id, look, outcomes)
    return outcomes[batch_id]


async def _create(trip: Trip, batch: BatchRecord) -> str | BatchOutcome:
    """Create (and pay for) the batch's upstream work: its task id, kept at once; or, from
    an upstream that answers at once, the batch settled from that answer; or the failed
    create settled."""
    port, batch_id = trip.port, batch.batch_id
    try:
        created = await port.create(batch_id, posts_of(batch), batch.idempotency_key)
    except AmbiguousCreate as exc:
        trip.book_gateway_retries([batch], exc.gateway_retries)
        trip.check_month()
        found = await _look_for_it(trip, batch) if port.facts.can_list else None
        if found is None:
            return settle_create_failure(trip, batch, exc)
        return found
    except UpstreamError as exc:
        trip.book_gateway_retries([batch], exc.gateway_retries)
        trip.check_month()
        return settle_create_failure(trip, batch, exc)
    crash_point(CrashPoint.AFTER_CREATE)
    if created.task_id is not None:  # the first thing kept after paying, with what a gateway did
        trip.keep_task_id(batch, created.task_id, retried=created.gateway_retries)
    else:  # a synchronous upstream: its answer, settled next, is the thing to keep
        trip.book_gateway_retries([batch], created.gateway_retries)
    crash_point(CrashPoint.AFTER_TASK_ID)
    trip.check_month()
    if created.finished is not None:  # a synchronous upstream answered the create itself
        return settle(trip, batch, created.finished, None)
    assert created.task_id is not None, "an upstream with task ids answers with one"
    return created.task_id


async def _look_for_it(trip: Trip, batch: BatchRecord) -> str | None:
    """A create whose answer was lost may have made the task: look for it by its metadata
    once the upstream lists it (R24, R49), never create it again here. Found: its id, kept."""
    await trip.clock.sleep(trip.settings.create_settle)
    found = await trip.port.find_task(batch.batch_id, batch.idempotency_key)
    if not isinstance(found, Found) or found.task_id is None:
        return None
    trip.keep_task_id(
        batch,
        found.task_id,
        adopted=f"found upstream task {found.task_id} by its metadata after an answer to its "
        "create was lost; it is polled, not paid again",
    )
    trip.check_month()
    return found.task_id
