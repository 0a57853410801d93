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

from dataclasses import dataclass
from logging import Logger, LoggerAdapter
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State

from postledger.failures.classify import failure_of
from postledger.failures.policy import Failure, after_failure
from postledger.guards.breaker import BreakerHeld
from postledger.guards.charges import BudgetHeld
from postledger.guards.spill import SpillFailed, SpillKind, spill_for
from postledger.ledger import Ledger, open_ledger
from postledger.record.crash import CrashPoint, crash_point
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchRecord, BatchStatus, utcnow
from postledger.record.month_lease import MonthLost
from postledger.record.reads import LedgerError
from postledger.recovery.interrupted import finish_from_output
from postledger.settings import Settings, current_settings
from postledger.upstreams import UpstreamNotConfigured, can_list, check_configured
from postledger.upstreams.calls import TaskSnapshot
from postledger.upstreams.errors import (
    AmbiguousCreate,
    TaskFailed,
    TransportError,
    UpstreamError,
)
from tasks.outcome import (
    BatchOutcome,
    HeldByBreaker,
    LedgerFailed,
    OverBudget,
    StopsRun,
    final_state,
    outcome_of,
)
from tasks.upstream_calls import (
    create_upstream_task,
    find_upstream_task,
    wait_for_upstream_task,
    with_request_retries,
)

RunLogger = Logger | LoggerAdapter[Any]

BATCH_TAG = "ai-batch"


@dataclass
class _Trip:
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
        crash_point(CrashPoint.AFTER_RUNNING)

    trip = _Trip(ledger, batch, settings, logger)
    try:
        return await _see_through(trip, resume)
    except LedgerUnavailable as exc:
        logger.error("%s: the ledger could not be written: %s", batch_id, exc)
        return LedgerFailed(batch_id, BatchStatus.RUNNING, str(exc))
    except SpillFailed as exc:
        logger.critical("%s: %s", batch_id, exc)
        return LedgerFailed(batch_id, BatchStatus.RUNNING, str(exc))


async def _see_through(trip: _Trip, resume: bool) -> BatchOutcome:
    settings, ledger, batch_id = trip.settings, trip.ledger, trip.batch_id
    try:
        snapshot, task_id = await _result_of(trip, resume)
    except UpstreamError as exc:
        failure: Failure = failure_of(exc)
        trip.logger.warning("%s: %s (%s)", batch_id, failure.reason, failure.kind)
        if isinstance(exc, TransportError) and exc.maybe_sent:
            _count_gateway_retries(trip, exc.gateway_retries)
        decision = after_failure(
            ledger.batch(batch_id),
            ledger.posts_of(batch_id),  # as they are now: one may have changed since
            failure,
            idempotent=settings.honours_keys(),
            limits=settings.limits(),
            now=utcnow(),
        )
        ledger.apply(batch_id, decision, upstream=settings.breaker_name())
        return outcome_of(batch_id, decision, trip.ledger_failure)

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


async def _result_of(trip: _Trip, resume: bool) -> tuple[TaskSnapshot, str | None]:
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
        raise TaskFailed(
            f"the upstream task ended {snapshot.status}: {snapshot.error or 'no output'}",
            billed=snapshot.billed,
        )
    return snapshot, task_id


async def _create(trip: _Trip) -> tuple[str | None, TaskSnapshot | None]:
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
        _save_task_id(
            trip,
            found,
            adopted=f"found upstream task {found} by its metadata after "
            "an answer to its create was lost; it is polled, not paid again",
        )
        return found, None
    crash_point(CrashPoint.AFTER_CREATE)
    _count_gateway_retries(trip, created.gateway_retries)
    if created.task_id is not None:
        _save_task_id(trip, created.task_id)
    crash_point(CrashPoint.AFTER_TASK_ID)
    return created.task_id, created.finished


def _save_task_id(trip: _Trip, task_id: str, adopted: str | None = None) -> None:
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


def _count_gateway_retries(trip: _Trip, retries: int) -> None:
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
