"""The batch task: one batch's whole life inside one `ai-batch` slot (R8).

queued -> running (persisted before paying, R3) -> upstream task id saved -> raw output saved as
received (R4) -> each item validated -> completed. Every step is written to the ledger before
the next one starts, so a crash anywhere leaves a record to recover from.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from postledger.analysis import check_output
from postledger.failures import classify
from postledger.ledger import open_ledger
from postledger.models import BatchStatus, FailureKind
from postledger.upstream import UpstreamError
from tasks.upstream_calls import create_upstream_task, wait_for_upstream_task

BATCH_TAG = "ai-batch"


@dataclass(frozen=True)
class BatchOutcome:
    batch_id: str
    status: BatchStatus
    completed: int
    failed: int
    reason: str | None = None


@task(
    name="process-batch",
    task_run_name="batch {batch_id}",
    tags=[BATCH_TAG],
    cache_policy=NO_CACHE,
    persist_result=False,
)
async def process_batch(batch_id: str, ledger_url: str) -> BatchOutcome:
    logger = get_run_logger()
    ledger = open_ledger(ledger_url)
    batch, posts = ledger.mark_running(batch_id)

    try:
        task_id = await create_upstream_task(
            batch_id, [(p.post_id, p.text) for p in posts], batch.idempotency_key, ledger_url
        )
        snapshot = await wait_for_upstream_task(batch_id, task_id, ledger_url)
    except UpstreamError as exc:
        kind = classify(exc)
        ledger.fail(batch_id, kind, str(exc))
        logger.warning("%s failed (%s): %s", batch_id, kind, exc)
        return BatchOutcome(batch_id, BatchStatus.FAILED, 0, len(posts), str(exc))
    if snapshot.output is None:
        reason = f"the upstream task ended {snapshot.status}: {snapshot.error or 'no output'}"
        ledger.fail(batch_id, FailureKind.UPSTREAM_FAILED, reason)
        logger.warning("%s failed: %s", batch_id, reason)
        return BatchOutcome(batch_id, BatchStatus.FAILED, 0, len(posts), reason)

    ledger.save_output(batch_id, snapshot.output, snapshot.usage)
    check = check_output(snapshot.output, batch.post_ids)
    ledger.finish(batch_id, check)
    logger.info("%s: %d completed, %d invalid", batch_id, len(check.valid), len(check.invalid))
    status = BatchStatus.FAILED if check.unusable else BatchStatus.COMPLETED
    return BatchOutcome(
        batch_id, status, len(check.valid), len(posts) - len(check.valid), check.unusable
    )
