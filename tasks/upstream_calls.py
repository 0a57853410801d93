"""The request layer (R10, R16): one upstream call per task run (a wait: one look after another
until the work ends or its time is up), retried by Prefect for transport faults only. What
each call does is the core's (`postledger.trip.one_call`); business retries (new attempts,
bisection, waiting for a verdict) live in the trip and the ledger, never here.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State, TaskRun
from prefect.runtime import task_run as current_task_run
from prefect.tasks import exponential_backoff

from postledger.ledger import open_ledger
from postledger.preflight import Adoption, adopt_orphans
from postledger.settings import Settings
from postledger.trip import (
    REAL_CLOCK,
    Created,
    CreateRequest,
    Found,
    JobLook,
    JobRequest,
    JobWanted,
    Look,
    NoVerdict,
    TransportError,
    count_request_retry,
    create_task,
    submit_job,
    upstream_for,
    wait_for_job,
    wait_for_task,
)


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


def _count_retry(ledger_url: str, batch_id: str, settings: Settings, holder: str | None) -> None:
    """A request retry is counted before it is made (R16), on the batch's ledger row."""
    if current_task_run.run_count > 1:
        ledger = open_ledger(ledger_url, busy_timeout=settings.sqlite_busy_timeout)
        count_request_retry(ledger, settings, batch_id, holder)


@task(name="create-upstream-task", task_run_name="create {batch_id}", **ONE_CALL)
async def create_upstream_task(
    batch_id: str,
    posts: Sequence[tuple[str, str]],
    idempotency_key: str,
    settings: Settings,
    ledger_url: str,
    holder: str | None = None,
) -> Created:
    """Create (and pay for) the upstream task of a batch. A synchronous upstream answers with
    the answer itself. Retried only when that cannot pay twice: the request never left, or
    the upstream honours the idempotency key that every create carries."""
    _count_retry(ledger_url, batch_id, settings, holder)
    request = CreateRequest(
        batch_id, settings.model, settings.analysis_in_use(), posts, idempotency_key
    )
    async with upstream_for(settings) as client:
        return await create_task(client, request)


@task(name="wait-for-upstream-task", task_run_name="wait {batch_id}", **ONE_CALL)
async def wait_for_upstream_task(
    batch_id: str,
    task_id: str,
    seconds: float,
    settings: Settings,
    ledger_url: str,
    holder: str | None = None,
) -> Look:
    """Look at the upstream task until it ends, a look gives no verdict, or `seconds` pass.
    Looking never pays, so it is always safe to retry."""
    _count_retry(ledger_url, batch_id, settings, holder)
    async with upstream_for(settings) as client:
        return await wait_for_task(
            client,
            task_id,
            seconds,
            clock=REAL_CLOCK,
            poll_interval=settings.poll_interval,
            poll_wait=settings.poll_wait,
        )


@task(name="find-upstream-task", task_run_name="find {batch_id}", **ONE_CALL)
async def find_upstream_task(
    batch_id: str, idempotency_key: str, settings: Settings
) -> Found | NoVerdict:
    """The upstream task made for this batch and key, looked for by its metadata. Listing
    never pays."""
    async with upstream_for(settings) as client:
        return await client.find_task(batch_id=batch_id, idempotency_key=idempotency_key)


@task(name="submit-upstream-job", task_run_name="submit {submission_id}", **ONE_CALL)
async def submit_upstream_job(
    submission_id: str,
    batch_ids: Sequence[str],
    idempotency_key: str,
    settings: Settings,
    ledger_url: str,
    holder: str | None = None,
) -> Created:
    """Create (and pay for) the upstream job of a submission, one request line per ledger
    batch, its file written from the ledger's requests a chunk at a time (the posts never
    pass through Prefect). Retried only when that cannot pay twice, as a create is. A
    request retry is counted on the submission's first batch (R16)."""
    _count_retry(ledger_url, batch_ids[0], settings, holder)
    ledger = open_ledger(ledger_url, busy_timeout=settings.sqlite_busy_timeout)
    lines = ledger.requests_of(batch_ids)
    job = JobRequest(
        submission_id, settings.model, settings.analysis_in_use(), lines, idempotency_key
    )
    async with upstream_for(settings) as client:
        return await submit_job(client, job)


@task(name="wait-for-upstream-job", task_run_name="wait {submission_id}", **ONE_CALL)
async def wait_for_upstream_job(
    submission_id: str,
    job_id: str,
    batch_ids: Sequence[str],
    seconds: float,
    followed_for: float,
    settings: Settings,
    ledger_url: str,
    holder: str | None = None,
) -> JobLook:
    """Look at the submission's job until it ends, a look gives no verdict, or `seconds`
    pass; once it ended, each ledger batch's own line. Looking never pays."""
    _count_retry(ledger_url, batch_ids[0], settings, holder)
    async with upstream_for(settings) as client:
        return await wait_for_job(
            client,
            job_id,
            batch_ids,
            seconds,
            clock=REAL_CLOCK,
            poll_interval=settings.poll_interval,
            followed_for=followed_for,
        )


@task(name="find-upstream-job", task_run_name="find {wanted.submission_id}", **ONE_CALL)
async def find_upstream_job(wanted: JobWanted, settings: Settings) -> Found | NoVerdict:
    """The upstream job made for this submission, looked for in the upstream's listing (by
    its metadata, or by what it carries). Listing never pays."""
    async with upstream_for(settings) as client:
        return await client.find_job(wanted)


@task(name="adopt-orphaned-tasks", task_run_name="adopt orphans {month}", **ONE_CALL)
async def adopt_orphaned_tasks(
    month: str, settings: Settings, ledger_url: str, holder: str | None = None
) -> Adoption:
    """Interrupted batches with no task id saved whose upstream task is found by its
    metadata: the id is saved, so recovery polls that task instead of asking to resubmit.
    Each search is a task run of its own, with the request retries; listing never pays."""
    from tasks.port import PrefectPort  # the port's calls are this module's tasks

    port = PrefectPort(settings, ledger_url, holder)
    ledger = open_ledger(ledger_url, busy_timeout=settings.sqlite_busy_timeout)
    return await adopt_orphans(ledger, month, port, holder=holder)
