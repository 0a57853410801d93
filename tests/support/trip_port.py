"""The trip's upstream port without Prefect, for tests that drive the real trip
(`postledger.trip`) over the real adapters: the same one-call functions the Prefect task runs
make (`postledger.trip.one_call`), with the request layer's retries as a plain loop instead of
Prefect's (transport faults only, each counted on the ledger before it is made, as the shell
counts them). Nothing of the trip, the adapters or the ledger is replaced.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from postledger.ledger import Ledger
from postledger.settings import Settings
from postledger.trip import Clock, Trip, UpstreamFacts, one_call
from postledger.upstreams import Upstream, facts_of, upstream_for
from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    Found,
    JobLook,
    JobRequest,
    JobWanted,
    Look,
    NoVerdict,
)
from postledger.upstreams.errors import TransportError

T = TypeVar("T")

# How the port gets a client for each call: the configured one (over HTTP), or one given a
# transport (an `httpx.MockTransport` answering as a model upstream).
ClientFactory = Callable[[], Upstream]


class DirectPort:
    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        clock: Clock,
        *,
        holder: str | None = None,
        client: ClientFactory | None = None,
    ) -> None:
        self.facts: UpstreamFacts = facts_of(settings)
        self.settings, self.ledger, self.clock, self.holder = settings, ledger, clock, holder
        self._client = client or (lambda: upstream_for(settings))
        self.calls: list[str] = []  # what was asked of the upstream, in order

    async def _retried(
        self, what: str, batch_id: str, call: Callable[[Upstream], Awaitable[T]]
    ) -> T:
        """One call with the request layer's retries: transport faults only, each counted on
        the batch before it is made (as `tasks/upstream_calls.py` counts Prefect's)."""
        delay = self.settings.request_backoff
        for attempt in range(self.settings.request_retries + 1):
            if attempt:
                one_call.count_request_retry(self.ledger, self.settings, batch_id, self.holder)
                await self.clock.sleep(delay)
                delay *= 2
            self.calls.append(what)
            try:
                async with self._client() as client:
                    return await call(client)
            except TransportError:
                if attempt == self.settings.request_retries:
                    raise
        raise AssertionError("unreachable")

    async def create(
        self, batch_id: str, posts: Sequence[tuple[str, str]], idempotency_key: str
    ) -> Created:
        s = self.settings
        request = CreateRequest(batch_id, s.model, s.analysis_in_use(), posts, idempotency_key)
        return await self._retried("create", batch_id, lambda c: one_call.create_task(c, request))

    async def wait(self, batch_id: str, task_id: str, seconds: float) -> Look:
        async def look(client: Upstream) -> Look:
            return await one_call.wait_for_task(
                client,
                task_id,
                seconds,
                clock=self.clock,
                poll_interval=self.settings.poll_interval,
                poll_wait=self.settings.poll_wait,
            )

        try:
            return await self._retried("wait", batch_id, look)
        except TransportError as exc:
            return one_call.no_verdict_of(exc)

    async def find_task(self, batch_id: str, idempotency_key: str) -> Found | NoVerdict:
        async def find(client: Upstream) -> Found | NoVerdict:
            return await client.find_task(batch_id=batch_id, idempotency_key=idempotency_key)

        try:
            return await self._retried("find", batch_id, find)
        except TransportError as exc:
            return one_call.no_verdict_of(exc)

    async def submit(
        self, submission_id: str, batch_ids: Sequence[str], idempotency_key: str
    ) -> Created:
        s = self.settings

        async def submit(client: Upstream) -> Created:
            lines = self.ledger.requests_of(batch_ids)  # as the task reads them, each attempt
            job = JobRequest(submission_id, s.model, s.analysis_in_use(), lines, idempotency_key)
            return await one_call.submit_job(client, job)

        return await self._retried("submit", batch_ids[0], submit)

    async def wait_job(
        self,
        submission_id: str,
        job_id: str,
        batch_ids: Sequence[str],
        seconds: float,
        followed_for: float = 0.0,
    ) -> JobLook:
        async def look(client: Upstream) -> JobLook:
            return await one_call.wait_for_job(
                client,
                job_id,
                batch_ids,
                seconds,
                clock=self.clock,
                poll_interval=self.settings.poll_interval,
                followed_for=followed_for,
            )

        try:
            return await self._retried("wait_job", batch_ids[0], look)
        except TransportError as exc:
            return one_call.no_verdict_of(exc)

    async def find_job(self, wanted: JobWanted) -> Found | NoVerdict:
        async def find(client: Upstream) -> Found | NoVerdict:
            return await client.find_job(wanted)

        ledger_batch = wanted.batch_ids[0]
        try:
            return await self._retried("find_job", ledger_batch, find)
        except TransportError as exc:
            return one_call.no_verdict_of(exc)


def direct_trip(
    ledger: Ledger,
    settings: Settings,
    clock: Clock,
    *,
    holder: str | None = None,
    client: ClientFactory | None = None,
) -> Trip:
    """A trip whose upstream calls are made straight, logging to the test's log."""
    import logging

    port = DirectPort(settings, ledger, clock, holder=holder, client=client)
    return Trip(ledger, settings, port, logging.getLogger("trip"), holder=holder, clock=clock)


class FakeClock:
    """A clock that never really sleeps: `sleep` moves it on. For a model upstream that
    answers at once; against a real simulator, whose tasks take real time, use the real one."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.slept = 0.0

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)
        self.slept += max(seconds, 0.0)
