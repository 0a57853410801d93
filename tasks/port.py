"""The trip's upstream port in a Prefect run: each call is a task run of its own, with
Prefect's request retries for transport faults (`tasks/upstream_calls.py`). A read whose
retries are spent reaches the trip as no verdict; a create's failure as the error it is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect import Task

from postledger.settings import Settings
from postledger.trip import (
    Created,
    Found,
    JobLook,
    JobWanted,
    Look,
    NoVerdict,
    TransportError,
    UpstreamFacts,
    facts_of,
    no_verdict_of,
)
from tasks.upstream_calls import (
    create_upstream_task,
    find_upstream_job,
    find_upstream_task,
    submit_upstream_job,
    wait_for_upstream_job,
    wait_for_upstream_task,
    with_request_retries,
)


class PrefectPort:
    def __init__(self, settings: Settings, ledger_url: str, holder: str | None) -> None:
        self.facts: UpstreamFacts = facts_of(settings)
        self._settings, self._ledger_url, self._holder = settings, ledger_url, holder

    async def create(
        self, batch_id: str, posts: Sequence[tuple[str, str]], idempotency_key: str
    ) -> Created:
        call = with_request_retries(create_upstream_task, self._settings)
        made: Created = await call(
            batch_id, posts, idempotency_key, self._settings, self._ledger_url, self._holder
        )
        return made

    async def wait(self, batch_id: str, task_id: str, seconds: float) -> Look:
        seen: Look = await self._read(
            wait_for_upstream_task,
            batch_id,
            task_id,
            seconds,
            self._settings,
            self._ledger_url,
            self._holder,
        )
        return seen

    async def find_task(self, batch_id: str, idempotency_key: str) -> Found | NoVerdict:
        found: Found | NoVerdict = await self._read(
            find_upstream_task, batch_id, idempotency_key, self._settings
        )
        return found

    async def submit(
        self, submission_id: str, batch_ids: Sequence[str], idempotency_key: str
    ) -> Created:
        call = with_request_retries(submit_upstream_job, self._settings)
        made: Created = await call(
            submission_id,
            batch_ids,
            idempotency_key,
            self._settings,
            self._ledger_url,
            self._holder,
        )
        return made

    async def wait_job(
        self,
        submission_id: str,
        job_id: str,
        batch_ids: Sequence[str],
        seconds: float,
        followed_for: float = 0.0,
    ) -> JobLook:
        seen: JobLook = await self._read(
            wait_for_upstream_job,
            submission_id,
            job_id,
            batch_ids,
            seconds,
            followed_for,
            self._settings,
            self._ledger_url,
            self._holder,
        )
        return seen

    async def find_job(self, wanted: JobWanted) -> Found | NoVerdict:
        found: Found | NoVerdict = await self._read(find_upstream_job, wanted, self._settings)
        return found

    async def _read(self, call: Task[..., Any], *args: Any) -> Any:
        """A read's task run, with the request retries; once they are spent, its transport
        fault is no verdict."""
        try:
            return await with_request_retries(call, self._settings)(*args)
        except TransportError as exc:
            return no_verdict_of(exc)
