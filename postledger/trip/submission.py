"""One submission's trip, on a Batch API: one upstream job carrying many ledger batches, one
request line each (docs/rules.md, "a slot on a Batch API").

Each batch is marked running (R3) in start order until the job is full or one may not start
(the breaker, the budget: it and those after it stay queued, R9). The submission is written
down before the upstream is called; the job id is kept on it and on each batch the moment it
is known (R23), before anything else. The job is followed until the upstream's verdict on
each line; each batch is settled from its own line by the same rules as a batch sent alone,
the moment its line is read. A failure of the job itself is each of its batches' failure,
and the breaker hears of it once.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from postledger.guards.spill import SpillFailed
from postledger.record.crash import CrashPoint, crash_point
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchStatus, SentBatch, SubmissionRecord
from postledger.record.month_lease import MonthLost
from postledger.recovery.interrupted import wanted_of
from postledger.trip.batch import month_lost
from postledger.trip.following import Backoff, follow
from postledger.trip.keeping import Trip
from postledger.trip.marking import mark_for_job
from postledger.trip.outcome import BatchOutcome, LedgerFailed, SubmissionEnded
from postledger.trip.settle import settle, settle_create_failure
from postledger.upstreams.calls import Found, JobLook, JobWanted, NoVerdict, NoVerdictReason
from postledger.upstreams.errors import AmbiguousCreate, UpstreamError
from postledger.upstreams.openai_batch import submission_metadata


def new_submission_id(month: str) -> str:
    return f"{month}-s{uuid.uuid4().hex[:8]}"


async def run_submission(
    trip: Trip,
    submission_id: str,
    batch_ids: Sequence[str],
    *,
    job_id: str | None = None,
    resend: bool = False,
) -> SubmissionEnded:
    """Send the batches, in order, as one upstream job and settle each from its line. With
    `job_id`, they were sent by an earlier, interrupted run in that job, whose id is saved:
    follow it, send nothing (R23). With `resend`, they were sent in this submission by an
    interrupted run that never saved its job's id, and a person said send them again (R24)."""
    outcomes: dict[str, BatchOutcome] = {}
    not_started: BatchOutcome | None = None
    batches: Sequence[SentBatch] = ()
    try:
        if job_id is not None:
            batches = trip.ledger.job_batches(batch_ids)
            await _follow_job(trip, submission_id, batches, job_id, outcomes)
        elif resend:
            batches, not_started = await _send_again(trip, submission_id, batch_ids, outcomes)
        else:
            batches, not_started = mark_for_job(trip, batch_ids)
            if batches:
                await _send(trip, submission_id, batches, outcomes)
    except MonthLost as exc:
        for batch in batches:
            outcomes.setdefault(batch.batch_id, month_lost(trip, batch.batch_id, exc))
    except (LedgerUnavailable, SpillFailed) as exc:
        log = trip.log.critical if isinstance(exc, SpillFailed) else trip.log.error
        log("%s: %s", submission_id, exc)
        for batch in batches:
            outcomes.setdefault(
                batch.batch_id, LedgerFailed(batch.batch_id, BatchStatus.RUNNING, str(exc))
            )
    sent = tuple(outcomes[batch.batch_id] for batch in batches if batch.batch_id in outcomes)
    return SubmissionEnded(submission_id, tuple(batch_ids), sent, not_started)


async def _send_again(
    trip: Trip, submission_id: str, batch_ids: Sequence[str], outcomes: dict[str, BatchOutcome]
) -> tuple[Sequence[SentBatch], BatchOutcome | None]:
    """The batches of a submission whose job's id was never saved, sent again after a yes:
    first its job is looked for in the upstream's listing (free), and adopted if it was made;
    a look that gives no answer leaves them waiting, uncertain; only when the upstream lists
    no such job are they sent, in this same submission, under its same key (so that a later
    look still finds what this send makes)."""
    ledger = trip.ledger
    submission = ledger.submission(submission_id)
    batches = ledger.job_batches(batch_ids)
    if trip.port.facts.can_list:
        found = await _search(trip, wanted_of(submission))
        if isinstance(found, NoVerdict):
            for nth, batch in enumerate(batches):
                outcomes[batch.batch_id] = settle(trip, batch, found, None, tell_breaker=nth == 0)
            return batches, None
        if found.task_id is not None:
            trip.keep_job_id(
                submission_id,
                batches,
                found.task_id,
                None,
                adopted=f"found upstream job {found.task_id} {found.by} before sending "
                "again: it is polled, not paid again",
            )
            trip.check_month()
            await _follow_job(trip, submission_id, batches, found.task_id, outcomes)
            return batches, None
    for batch_id in batch_ids:
        ledger.resend_later(
            batch_id,
            "resubmission confirmed by a person, in the same submission",
            max_attempts=trip.settings.max_attempts,
            holder=trip.holder,
        )
    marked, not_started = mark_for_job(trip, batch_ids)
    if marked:
        await _send(trip, submission_id, marked, outcomes, key=submission.idempotency_key)
    return marked, not_started


async def _send(
    trip: Trip,
    submission_id: str,
    batches: Sequence[SentBatch],
    outcomes: dict[str, BatchOutcome],
    *,
    key: str | None = None,
) -> None:
    """Write the submission down (unless it is sent again under its `key`), make its job
    (paid), keep its id, and follow it."""
    crash_point(CrashPoint.AFTER_RUNNING)
    port = trip.port
    if key is None:
        key = uuid.uuid4().hex
        trip.ledger.record_submission(
            SubmissionRecord(
                submission_id=submission_id,
                month=batches[0].month,
                idempotency_key=key,
                batch_ids=[b.batch_id for b in batches],
                metadata_sent=submission_metadata(submission_id, key)
                if port.facts.sends_metadata
                else {},
            ),
            holder=trip.holder,
        )
    try:  # the job's file is written from the ledger, a chunk of batches at a time
        created = await port.submit(submission_id, [batch.batch_id for batch in batches], key)
    except AmbiguousCreate as exc:
        trip.book_gateway_retries(batches, exc.gateway_retries)
        trip.check_month()
        job_id = await _look_for_it(trip, submission_id, batches, key)
        if job_id is None:
            _each_failed(trip, batches, exc, outcomes)
            return
        await _follow_job(trip, submission_id, batches, job_id, outcomes)
        return
    except UpstreamError as exc:
        trip.book_gateway_retries(batches, exc.gateway_retries)
        trip.check_month()
        _each_failed(trip, batches, exc, outcomes)
        return
    crash_point(CrashPoint.AFTER_CREATE)
    assert created.task_id is not None, "a Batch API answers a create with the job's id"
    trip.keep_job_id(  # the first thing kept after paying, with what a gateway did
        submission_id, batches, created.task_id, created.file_id, retried=created.gateway_retries
    )
    crash_point(CrashPoint.AFTER_TASK_ID)
    trip.check_month()
    await _follow_job(trip, submission_id, batches, created.task_id, outcomes)


async def _look_for_it(
    trip: Trip, submission_id: str, batches: Sequence[SentBatch], key: str
) -> str | None:
    """A create whose answer was lost may have made the job: look for it in the upstream's
    listing once it lists it (R24, R49), never make it again here. Found: its id, kept."""
    if not trip.port.facts.can_list:
        return None
    await trip.clock.sleep(trip.settings.create_settle)
    found = await _search(trip, wanted_of(trip.ledger.submission(submission_id)))
    if not isinstance(found, Found) or found.task_id is None:
        return None
    trip.keep_job_id(
        submission_id,
        batches,
        found.task_id,
        None,
        adopted=f"found upstream job {found.task_id} {found.by} after an answer to its "
        "create was lost; it is polled, not paid again",
    )
    trip.check_month()
    return found.task_id


async def _search(trip: Trip, wanted: JobWanted) -> Found | NoVerdict:
    """The upstream's listing searched for the submission's job. A job that may be it but
    still runs (a Message Batch is told by its results) is searched for again after a
    backoff, as a job is followed, until our deadline."""
    give_up = trip.clock.monotonic() + trip.port.facts.wait_deadline
    backoff = Backoff(trip.settings.request_backoff, trip.settings.rate_limit_max_wait)
    while True:
        found = await trip.port.find_job(wanted)
        if not isinstance(found, NoVerdict) or found.reason is not NoVerdictReason.UNCONFIRMED:
            return found
        if (remaining := give_up - trip.clock.monotonic()) <= 0:
            return found
        trip.log.info("%s: %s; searching again", wanted.submission_id, found.detail)
        await trip.clock.sleep(min(backoff.after(found), remaining))


async def _follow_job(
    trip: Trip,
    submission_id: str,
    batches: Sequence[SentBatch],
    job_id: str,
    outcomes: dict[str, BatchOutcome],
) -> None:
    started = trip.clock.monotonic()

    async def look(batch_ids: Sequence[str], seconds: float) -> JobLook:
        # A look lasts a minute at most (the counts are kept between two): the next one
        # goes on from how long the job has been followed, as one long look would.
        waited = trip.clock.monotonic() - started
        return await trip.port.wait_job(submission_id, job_id, batch_ids, seconds, waited)

    await follow(trip, batches, job_id, look, outcomes)


def _each_failed(
    trip: Trip, batches: Sequence[SentBatch], exc: UpstreamError, outcomes: dict[str, BatchOutcome]
) -> None:
    """The job's create failed: that is each of its batches' failure, decided by the same
    rules; its breaker hears of it once. A ledger write that fails is that batch's outcome."""
    for nth, batch in enumerate(batches):
        try:
            outcomes[batch.batch_id] = settle_create_failure(
                trip, batch, exc, tell_breaker=nth == 0
            )
        except LedgerUnavailable as ledger_exc:
            trip.failed_to_write(ledger_exc)
            outcomes[batch.batch_id] = LedgerFailed(
                batch.batch_id, BatchStatus.RUNNING, str(ledger_exc)
            )
