"""The request layer (R10, R16): one HTTP call per task, retried by Prefect for transport
faults only. Business retries (new attempts, bisection, waiting) live in the ledger, never here.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State, TaskRun
from prefect.runtime import task_run as current_task_run
from prefect.tasks import exponential_backoff

from postledger.guards.spill import SpillKind, spill_for
from postledger.ledger import open_ledger
from postledger.record.db import LedgerUnavailable
from postledger.recovery.interrupted import adopt_orphans
from postledger.settings import Settings, current_settings
from postledger.upstreams import upstream_for
from postledger.upstreams.calls import Created, CreateRequest, JobRequest, JobSnapshot, TaskSnapshot
from postledger.upstreams.errors import AmbiguousCreate, TransportError


def retry_transient(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry only transport faults; every other error is for the business layer to judge."""
    # The engine hands over Failed(data=<the exception>); reading `data` needs no await.
    return isinstance(state.data, TransportError)


# What every one-call task shares: Prefect retries transport faults only, and nothing of a
# paid call is cached or persisted by Prefect (the ledger keeps it).
ONE_CALL: dict[str, Any] = {
    "retry_condition_fn": retry_transient,
    "cache_policy": NO_CACHE,
    "persist_result": False,
}


def with_request_retries(call: Task[..., Any], settings: Settings) -> Task[..., Any]:
    """The task with this run's retry settings: exponential backoff with jitter (R10)."""
    return _with_retries(call, settings.request_retries, settings.request_backoff)


@functools.lru_cache(maxsize=64)
def _with_retries(call: Task[..., Any], retries: int, backoff: float) -> Task[..., Any]:
    # Cached: `with_options` copies the task, a few ms of CPU on every batch's critical path.
    return call.with_options(
        retries=retries,
        retry_delay_seconds=exponential_backoff(backoff_factor=backoff),
        retry_jitter_factor=0.5,
        retry_condition_fn=retry_transient,
    )


def _count_retry(ledger_url: str, batch_id: str, settings: Settings) -> None:
    """A retry is counted before it is made (R16). If the ledger cannot take the count, it is
    spilled and the call is not made: the batch stops here, and no new batch starts (R20)."""
    if current_task_run.run_count > 1:
        try:
            open_ledger(ledger_url).count_request_retry(batch_id)
        except LedgerUnavailable:
            spill_for(settings, batch_id).add(SpillKind.REQUEST_RETRY, batch_id)
            raise


@task(
    name="create-upstream-task",
    task_run_name="create {batch_id}",
    **ONE_CALL,
)
async def create_upstream_task(
    batch_id: str,
    posts: Sequence[tuple[str, str]],
    idempotency_key: str,
    ledger_url: str,
) -> Created:
    """Create (and pay for) the upstream task of a batch. A synchronous upstream answers with
    the finished result. The caller saves the task id the moment this returns (R23).

    Retried only when that cannot pay twice: the request never left, or the upstream honours
    the idempotency key that every create carries."""
    settings = current_settings()
    _count_retry(ledger_url, batch_id, settings)
    async with upstream_for(settings) as client:
        try:
            return await client.create(
                CreateRequest(batch_id, settings.model, settings.prompt, posts, idempotency_key)
            )
        except TransportError as exc:
            if exc.maybe_sent and not client.honours_keys:
                raise AmbiguousCreate(str(exc)) from None
            raise


@task(
    name="wait-for-upstream-task",
    task_run_name="wait {batch_id}",
    **ONE_CALL,
)
async def wait_for_upstream_task(batch_id: str, task_id: str, ledger_url: str) -> TaskSnapshot:
    """Poll the upstream task until it ends; polling never pays, so it is always safe to retry."""
    settings = current_settings()
    _count_retry(ledger_url, batch_id, settings)
    async with upstream_for(settings) as client:
        return await client.wait_for_task(
            task_id,
            poll_interval=settings.poll_interval,
            poll_wait=settings.poll_wait,
            deadline=settings.wait_deadline(),
        )


@task(
    name="find-upstream-task",
    task_run_name="find {batch_id}",
    **ONE_CALL,
)
async def find_upstream_task(
    batch_id: str, idempotency_key: str, settle: float = 0.0
) -> str | None:
    """The upstream task made for this batch and key, looked for by its metadata after
    `settle` seconds (a new task takes a moment to be listed). Listing never pays."""
    await asyncio.sleep(settle)
    settings = current_settings()
    async with upstream_for(settings) as client:
        return await client.find_task(batch_id=batch_id, idempotency_key=idempotency_key)


@task(
    name="submit-upstream-job",
    task_run_name="submit {submission_id}",
    **ONE_CALL,
)
async def submit_upstream_job(
    submission_id: str,
    lines: Sequence[tuple[str, Sequence[tuple[str, str]]]],
    idempotency_key: str,
    ledger_url: str,
) -> Created:
    """Create (and pay for) the upstream job of a submission, one request line per ledger
    batch. Retried only when that cannot pay twice, as a create is. A request retry is counted
    on the submission's first batch (R16)."""
    settings = current_settings()
    _count_retry(ledger_url, lines[0][0], settings)
    async with upstream_for(settings) as client:
        job = JobRequest(submission_id, settings.model, settings.prompt, lines, idempotency_key)
        try:
            return await client.submit(job)
        except TransportError as exc:
            if exc.maybe_sent and not client.honours_keys:
                raise AmbiguousCreate(str(exc)) from None
            raise


@task(
    name="wait-for-upstream-job",
    task_run_name="wait {submission_id}",
    **ONE_CALL,
)
async def wait_for_upstream_job(
    submission_id: str, job_id: str, batch_ids: Sequence[str], ledger_url: str
) -> JobSnapshot:
    """Poll the submission's job until it ends; then each ledger batch's own result. Polling
    never pays, so it is always safe to retry."""
    settings = current_settings()
    _count_retry(ledger_url, batch_ids[0], settings)
    async with upstream_for(settings) as client:
        return await client.wait_for_job(
            job_id,
            batch_ids,
            poll_interval=settings.poll_interval,
            deadline=settings.wait_deadline(),
        )


@task(
    name="find-upstream-job",
    task_run_name="find {submission_id}",
    **ONE_CALL,
)
async def find_upstream_job(
    submission_id: str, idempotency_key: str, settle: float = 0.0
) -> str | None:
    """The upstream job made for this submission and key, looked for by its metadata after
    `settle` seconds. Listing never pays."""
    await asyncio.sleep(settle)
    async with upstream_for(current_settings()) as client:
        return await client.find_job(submission_id=submission_id, idempotency_key=idempotency_key)


@task(
    name="adopt-orphaned-tasks",
    task_run_name="adopt orphans {month}",
    **ONE_CALL,
)
async def adopt_orphaned_tasks(month: str, ledger_url: str) -> list[str]:
    """Interrupted batches with no task id saved whose upstream task is found by its
    metadata: the id is saved, so recovery polls that task instead of asking to resubmit.
    Listing never pays. Returns the batches adopted."""
    settings = current_settings()
    async with upstream_for(settings) as client:
        return await adopt_orphans(open_ledger(ledger_url), month, client)
