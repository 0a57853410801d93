"""One batch's whole life, run inside a lane that holds an `ai-batch` slot (R8,
`tasks/lanes.py`).

queued -> running (persisted before paying, R3) -> upstream task id saved -> raw output saved as
received (R4) -> checked -> the business decision applied. Every step is written to the ledger
before the next one starts, so a crash anywhere leaves a record to recover from.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import get_run_logger

from postledger.breaker import BreakerHeld
from postledger.charges import BudgetHeld
from postledger.crash import CrashPoint, crash_point
from postledger.db import LedgerUnavailable
from postledger.failures import failure_of
from postledger.ledger import LedgerError, open_ledger
from postledger.models import BatchStatus, FailureKind, utcnow
from postledger.policy import Decision, Failure, after_failure
from postledger.recovery import finish_from_output
from postledger.settings import current_settings
from postledger.spill import Spill, SpillKind
from postledger.upstream import TaskSnapshot, UpstreamError
from tasks.upstream_calls import (
    create_upstream_task,
    wait_for_upstream_task,
    with_request_retries,
)


@dataclass(frozen=True)
class BatchOutcome:
    batch_id: str
    status: BatchStatus
    why: str
    kind: FailureKind | None = None
    stop_run: str | None = None  # R14: what a person must fix before anything else is sent
    held: bool = False  # the breaker did not let it start: still queued, nothing paid (R18)
    ledger_failure: str | None = None  # a ledger write failed: nothing new may start (R20)
    over_budget: str | None = None  # not started: it could cross the month's max_cost

    @classmethod
    def of(cls, batch_id: str, decision: Decision) -> BatchOutcome:
        return cls(batch_id, decision.batch_to, decision.why, decision.kind, decision.stop_run)


async def process_batch(batch_id: str, ledger_url: str, resume: bool = False) -> BatchOutcome:
    """Send the batch and see it through, inside the task run of the lane that holds its slot
    (not a task run of its own: a nested one costs ~5 ms between two batches; its two HTTP
    calls are task runs, named after it). With `resume`, the batch was sent by an earlier,
    interrupted run and its upstream task id is saved: poll that task, send nothing (R23)."""
    logger = get_run_logger()
    settings = current_settings()
    upstream = settings.breaker_name()
    ledger = open_ledger(ledger_url)
    if resume:
        batch, posts = ledger.batch(batch_id), ledger.posts_of(batch_id)
    else:
        try:
            batch, posts = ledger.mark_running(
                batch_id,
                upstream,
                idempotent=settings.honours_keys(),
                price=settings.price(),
                prompt=settings.prompt,
                max_cost=settings.max_cost,
            )
        except BreakerHeld as exc:
            return BatchOutcome(batch_id, BatchStatus.QUEUED, str(exc), held=True)
        except BudgetHeld as exc:
            return BatchOutcome(batch_id, BatchStatus.QUEUED, str(exc), over_budget=str(exc))
        except LedgerUnavailable as exc:  # no record, no call (R20)
            return BatchOutcome(batch_id, BatchStatus.QUEUED, "not sent", ledger_failure=str(exc))
        crash_point(CrashPoint.AFTER_RUNNING)

    try:
        if resume:
            if batch.upstream_task_id is None:
                raise LedgerError(f"batch {batch_id} has no task id to poll")
            task_id: str | None = batch.upstream_task_id
            finished: TaskSnapshot | None = None
        else:
            created = await with_request_retries(create_upstream_task, settings)(
                batch_id,
                [(post_id, text) for post_id, text in batch.request or []],
                batch.idempotency_key,
                ledger_url,
            )
            task_id, finished = created.task_id, created.finished
        if finished is not None:  # a synchronous upstream answered the create itself
            snapshot = finished
        elif task_id is None:
            raise UpstreamError("the upstream gave neither a task id nor a result")
        else:
            snapshot = await with_request_retries(wait_for_upstream_task, settings)(
                batch_id, task_id, ledger_url
            )
        if snapshot.output is None:
            raise UpstreamError(
                f"the upstream task ended {snapshot.status}: {snapshot.error or 'no output'}"
            )
    except UpstreamError as exc:
        failure: Failure = failure_of(exc)
        logger.warning("%s: %s (%s)", batch_id, failure.reason, failure.kind)
        try:
            decision = after_failure(
                ledger.batch(batch_id),
                posts,
                failure,
                idempotent=settings.honours_keys(),
                limits=settings.limits(),
                now=utcnow(),
            )
            ledger.apply(batch_id, decision, upstream=upstream)
        except LedgerUnavailable as ledger_exc:
            return BatchOutcome(
                batch_id, BatchStatus.RUNNING, failure.reason, ledger_failure=str(ledger_exc)
            )
        return BatchOutcome.of(batch_id, decision)

    crash_point(CrashPoint.AFTER_OUTPUT)
    try:
        ledger.save_output(batch_id, snapshot.output, snapshot.usage, settings.price())
    except LedgerUnavailable as exc:
        # R20: paid for and delivered; the next run imports it instead of paying again.
        Spill(settings.resolved_spill_path()).add(
            SpillKind.OUTPUT,
            batch_id,
            task_id=task_id,
            output=snapshot.output,
            usage=snapshot.usage,
        )
        logger.error("%s: output kept in the spill file: %s", batch_id, exc)
        return BatchOutcome(batch_id, BatchStatus.RUNNING, "spilled", ledger_failure=str(exc))

    crash_point(CrashPoint.DURING_VALIDATION)
    try:
        decision = finish_from_output(ledger, batch_id, settings.limits(), upstream)
    except LedgerUnavailable as exc:  # the output is saved: the next run validates it (R21)
        return BatchOutcome(batch_id, BatchStatus.RECEIVED, "saved", ledger_failure=str(exc))
    crash_point(CrashPoint.AFTER_COMPLETED)
    logger.info("%s: %s", batch_id, decision.why)
    return BatchOutcome.of(batch_id, decision)
