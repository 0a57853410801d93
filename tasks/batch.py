"""One batch's whole life as one `process-batch` task run, tagged `ai-batch`: the tag's slot
covers create, wait, check and save (R8), and the task run's final state says what happened to
the batch (`tasks/outcome.py`).

queued -> running (persisted before paying, R3) -> upstream task id saved -> raw output saved as
received (R4) -> checked -> the business decision applied. Every step is written to the ledger
before the next one starts, so a crash anywhere leaves a record to recover from. A ledger
write that fails on the way stops new batches (R20); what the batch already paid for is kept
in the spill file, and if even that cannot be written the run stops loudly with the facts.
The create and wait calls are nested one-call task runs with the request retries (R10, R16);
this task has no Prefect retries: business retries are the ledger's.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State

from postledger.guards.spill import SpillFailed
from postledger.ledger import open_ledger
from postledger.record.crash import CrashPoint, crash_point
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchRecord, BatchStatus
from postledger.record.reads import LedgerError
from postledger.settings import current_settings
from postledger.upstreams import can_list
from postledger.upstreams.calls import TaskSnapshot
from postledger.upstreams.errors import (
    AmbiguousCreate,
    UpstreamError,
)
from tasks.outcome import (
    BatchOutcome,
    LedgerFailed,
    final_state,
)
from tasks.settle import (
    Trip,
    count_gateway_retries,
    failure_of_snapshot,
    mark_sent,
    save_task_id,
    settle_failure,
    settle_output,
)
from tasks.upstream_calls import (
    create_upstream_task,
    find_upstream_task,
    wait_for_upstream_task,
    with_request_retries,
)

BATCH_TAG = "ai-batch"


@task(
    name="process-batch",
    task_run_name="{batch_id}",
    tags=[BATCH_TAG],
    cache_policy=NO_CACHE,
    persist_result=False,
)
async def process_batch(
    batch_id: str, ledger_url: str, resume: bool = False, holder: str | None = None
) -> State[Any]:
    """Send the batch and see it through. With `resume`, the batch was sent by an earlier,
    interrupted run and its upstream task id is saved: poll that task, send nothing (R23).
    `holder`: the run's claim on the month, checked in the transaction that marks the batch
    running."""
    return final_state(await _process(batch_id, ledger_url, resume, holder))


async def _process(
    batch_id: str, ledger_url: str, resume: bool, holder: str | None
) -> BatchOutcome:
    logger = get_run_logger()
    settings = current_settings()
    ledger = open_ledger(ledger_url)
    if resume:
        batch = ledger.batch(batch_id)
    else:
        marked = mark_sent(ledger, batch_id, settings, holder)
        if not isinstance(marked, BatchRecord):
            return marked
        batch = marked
        crash_point(CrashPoint.AFTER_RUNNING)

    trip = Trip(ledger, batch, settings, logger)
    try:
        return await _see_through(trip, resume)
    except LedgerUnavailable as exc:
        logger.error("%s: the ledger could not be written: %s", batch_id, exc)
        return LedgerFailed(batch_id, BatchStatus.RUNNING, str(exc))
    except SpillFailed as exc:
        logger.critical("%s: %s", batch_id, exc)
        return LedgerFailed(batch_id, BatchStatus.RUNNING, str(exc))


async def _see_through(trip: Trip, resume: bool) -> BatchOutcome:
    try:
        snapshot, task_id = await _result_of(trip, resume)
    except UpstreamError as exc:
        return settle_failure(trip, exc, upstream=trip.settings.breaker_name())
    return settle_output(trip, snapshot, task_id)


async def _result_of(trip: Trip, resume: bool) -> tuple[TaskSnapshot, str | None]:
    """The batch's finished upstream result and its task id (None for a synchronous upstream);
    raises the `UpstreamError` that ended it otherwise."""
    settings, batch = trip.settings, trip.batch
    if resume:
        if batch.upstream_task_id is None:
            raise LedgerError(f"batch {batch.batch_id} has no task id to poll")
        task_id: str | None = batch.upstream_task_id
        finished: TaskSnapshot | None = None
    else:
        task_id, finished = await _create(trip)
    if finished is not None:  # a synchronous upstream answered the create itself
        snapshot = finished
    elif task_id is None:
        raise UpstreamError("the upstream gave neither a task id nor a result")
    else:
        snapshot = await with_request_retries(wait_for_upstream_task, settings)(
            batch.batch_id, task_id, trip.ledger.url
        )
    if snapshot.output is None:
        raise failure_of_snapshot(snapshot)
    return snapshot, task_id


async def _create(trip: Trip) -> tuple[str | None, TaskSnapshot | None]:
    """Create (and pay for) the batch's upstream work; its task id is saved at once (R23)."""
    settings, batch = trip.settings, trip.batch
    try:
        created = await with_request_retries(create_upstream_task, settings)(
            batch.batch_id,
            [(post_id, text) for post_id, text in batch.request or []],
            batch.idempotency_key,
            trip.ledger.url,
        )
    except AmbiguousCreate:
        if not can_list(settings):
            raise
        # It may have been made: look for it by its metadata once the upstream shows it,
        # never create it again here (R24). Not found: uncertain, for recovery to look again.
        found = await with_request_retries(find_upstream_task, settings)(
            batch.batch_id, batch.idempotency_key, settle=settings.create_settle
        )
        if found is None:
            raise
        save_task_id(
            trip,
            found,
            adopted=f"found upstream task {found} by its metadata after "
            "an answer to its create was lost; it is polled, not paid again",
        )
        return found, None
    crash_point(CrashPoint.AFTER_CREATE)
    count_gateway_retries(trip, created.gateway_retries)
    if created.task_id is not None:
        save_task_id(trip, created.task_id)
    crash_point(CrashPoint.AFTER_TASK_ID)
    return created.task_id, created.finished
