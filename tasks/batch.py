"""The batch task: one batch's whole life inside one `ai-batch` slot (R8).

queued -> running (persisted before paying, R3) -> upstream task id saved -> raw output saved as
received (R4) -> checked -> the business decision applied. Every step is written to the ledger
before the next one starts, so a crash anywhere leaves a record to recover from.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from postledger.analysis import check_output
from postledger.failures import failure_of
from postledger.ledger import open_ledger
from postledger.models import BatchStatus, FailureKind, utcnow
from postledger.policy import Decision, Failure, after_failure, after_output
from postledger.settings import Settings
from postledger.upstream import UpstreamError
from tasks.upstream_calls import (
    create_upstream_task,
    wait_for_upstream_task,
    with_request_retries,
)

BATCH_TAG = "ai-batch"


@dataclass(frozen=True)
class BatchOutcome:
    batch_id: str
    status: BatchStatus
    why: str
    kind: FailureKind | None = None
    stop_run: str | None = None  # R14: what a person must fix before anything else is sent

    @classmethod
    def of(cls, batch_id: str, decision: Decision) -> BatchOutcome:
        return cls(batch_id, decision.batch_to, decision.why, decision.kind, decision.stop_run)


@task(
    name="process-batch",
    task_run_name="batch {batch_id}",
    tags=[BATCH_TAG],
    cache_policy=NO_CACHE,
    persist_result=False,
)
async def process_batch(batch_id: str, ledger_url: str) -> BatchOutcome:
    logger = get_run_logger()
    settings = Settings()
    limits = settings.limits()
    ledger = open_ledger(ledger_url)
    batch, posts = ledger.mark_running(batch_id)

    try:
        task_id = await with_request_retries(create_upstream_task, settings)(
            batch_id, [(p.post_id, p.text) for p in posts], batch.idempotency_key, ledger_url
        )
        snapshot = await with_request_retries(wait_for_upstream_task, settings)(
            batch_id, task_id, ledger_url
        )
        if snapshot.output is None:
            raise UpstreamError(
                f"the upstream task ended {snapshot.status}: {snapshot.error or 'no output'}"
            )
    except UpstreamError as exc:
        batch = ledger.batch(batch_id)
        failure: Failure = failure_of(exc)
        decision = after_failure(
            batch,
            posts,
            failure,
            idempotent=settings.upstream_idempotent,
            limits=limits,
            now=utcnow(),
        )
        ledger.apply(batch_id, decision)
        logger.warning(
            "%s: %s (%s) -> %s", batch_id, failure.reason, failure.kind, decision.batch_to
        )
        return BatchOutcome.of(batch_id, decision)

    ledger.save_output(batch_id, snapshot.output, snapshot.usage)
    check = check_output(snapshot.output, batch.post_ids)
    decision = after_output(batch, ledger.posts_of(batch_id), check, limits)
    ledger.apply(batch_id, decision, check)
    logger.info("%s: %s", batch_id, decision.why)
    return BatchOutcome.of(batch_id, decision)
