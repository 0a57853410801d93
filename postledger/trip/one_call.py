"""The upstream calls a port makes, one request each (a wait: one look after another until
the work ends or its time is up), the same for a Prefect task run and for the money model.

What the request layer may retry is a transport fault (`TransportError`), and only where a
retry cannot pay twice: a create that may have reached an upstream that does not honour keys
is raised as `AmbiguousCreate` instead, which no request layer retries. Once the retries are
spent, a port hands the trip a read's transport fault as no verdict (`no_verdict_of`).
"""

from __future__ import annotations

from collections.abc import Sequence

from postledger.guards.spill import SpillKind, SpillLocation, spill_for
from postledger.ledger import Ledger
from postledger.record.db import LedgerUnavailable
from postledger.trip.port import Clock
from postledger.upstreams import Upstream
from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    JobLook,
    JobRequest,
    Look,
    NoVerdict,
    NoVerdictReason,
    Running,
)
from postledger.upstreams.errors import AmbiguousCreate, TransportError


async def create_task(upstream: Upstream, request: CreateRequest) -> Created:
    """Create (and pay for) one batch's upstream work."""
    try:
        return await upstream.create(request)
    except TransportError as exc:
        raise _ambiguous(exc, upstream) from None


async def submit_job(upstream: Upstream, job: JobRequest) -> Created:
    """Create (and pay for) one submission's upstream job."""
    try:
        return await upstream.submit(job)
    except TransportError as exc:
        raise _ambiguous(exc, upstream) from None


def _ambiguous(exc: TransportError, upstream: Upstream) -> TransportError | AmbiguousCreate:
    """A create's transport fault as the request layer may treat it: retried when a resend
    cannot pay twice (it never left, or the upstream honours the key every create carries);
    ambiguous otherwise, with the gateway's own retries it reported kept on the books."""
    if not exc.maybe_sent or upstream.honours_keys:
        return exc
    return AmbiguousCreate(str(exc), status=exc.http_status, gateway_retries=exc.gateway_retries)


async def wait_for_task(
    upstream: Upstream,
    task_id: str,
    seconds: float,
    *,
    clock: Clock,
    poll_interval: float,
    poll_wait: float,
) -> Look:
    """Look at a task until a look gives its verdict or no verdict, or `seconds` pass (the
    last look then says `Running`). Long-polls where the upstream can, so a result arrives
    the moment it is ready; otherwise waits between looks, longer for a Batch API."""
    give_up = clock.monotonic() + seconds
    long_poll = upstream.long_polls and poll_wait > 0
    interval = poll_interval
    while True:
        remaining = max(give_up - clock.monotonic(), 0.0)
        look = await upstream.look(task_id, wait=min(poll_wait, remaining) if long_poll else 0.0)
        if not isinstance(look, Running) or clock.monotonic() >= give_up:
            return look
        if not long_poll:
            await clock.sleep(min(interval, max(give_up - clock.monotonic(), 0.0)))
            interval = min(interval * 1.5, upstream.max_poll_interval or interval)


LOOKS_PER_AGE = 20  # the wait between two looks at a job: its age followed, over this


async def wait_for_job(
    upstream: Upstream,
    job_id: str,
    batch_ids: Sequence[str],
    seconds: float,
    *,
    clock: Clock,
    poll_interval: float,
    followed_for: float = 0.0,
) -> JobLook:
    """Look at a job until it ends, a look gives no verdict, or `seconds` pass. Between two
    looks, a twentieth of the time the job has been followed (`followed_for` before this
    call), from `poll_interval` up to the upstream's longest: a job is seen ended at most a
    twentieth of its time late (a 60 s job, ~3 s), and a day-long one is looked at every 30 s
    after its first ten minutes, not every second. A look is one small GET."""
    started = clock.monotonic() - followed_for
    give_up = clock.monotonic() + seconds
    longest = upstream.max_poll_interval or poll_interval
    while True:
        look = await upstream.look_job(job_id, batch_ids)
        if not isinstance(look, Running) or clock.monotonic() >= give_up:
            return look
        interval = min(max(poll_interval, (clock.monotonic() - started) / LOOKS_PER_AGE), longest)
        await clock.sleep(min(interval, max(give_up - clock.monotonic(), 0.0)))


def no_verdict_of(exc: TransportError) -> NoVerdict:
    """A read's transport fault, once the request retries are spent: it says nothing about
    the work, which may well be done (and paid for)."""
    return NoVerdict(NoVerdictReason.TRANSPORT, f"request retries exhausted: {exc}")


def count_request_retry(
    ledger: Ledger, spill: SpillLocation, batch_id: str, holder: str | None
) -> None:
    """A request retry is counted before it is made (R16). If the ledger cannot take the
    count, it is spilled and the retry is not made: the batch stops there, and no new batch
    starts (R20); `SpillFailed` if the spill cannot take it either."""
    try:
        ledger.count_request_retry(batch_id, holder=holder)
    except LedgerUnavailable:
        spill_for(spill, batch_id).add(SpillKind.REQUEST_RETRY, batch_id)
        raise
