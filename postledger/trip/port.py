"""The seam between a trip and whoever makes its upstream calls.

A trip (`batch.py`, `submission.py`) decides; a port makes one upstream call per method, with
the request layer's retries (transport faults only) already spent when it returns. In a
Prefect run each call is a task run with Prefect's retries (`tasks/upstream_calls.py`);
the money model makes the same calls straight over a model upstream. Either way a port hands
the trip types, never an exception of the upstream's: a look that could not be made is
`NoVerdict`, a create that failed is the `UpstreamError` the trip classifies. Errors of our
own (a ledger or spill write that failed, the month lost to another run) pass through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from postledger.upstreams import UpstreamFacts
from postledger.upstreams.calls import Created, Found, JobLook, JobWanted, Look, NoVerdict
from postledger.upstreams.clock import REAL_CLOCK, Clock, RealClock

__all__ = ["REAL_CLOCK", "Clock", "RealClock", "UpstreamFacts", "UpstreamPort"]


class UpstreamPort(Protocol):
    facts: UpstreamFacts

    async def create(
        self, batch_id: str, posts: Sequence[tuple[str, str]], idempotency_key: str
    ) -> Created:
        """Create (and pay for) one batch's upstream work. Raises the `UpstreamError` that
        ended it: an `AmbiguousCreate` when it may have been made upstream and the upstream
        does not honour keys (never retried at the request layer)."""
        ...

    async def wait(self, batch_id: str, task_id: str, seconds: float) -> Look:
        """Look at the task until it ends or `seconds` pass (`Running` then): its verdict, or
        no verdict, as soon as one look gives either."""
        ...

    async def find_task(self, batch_id: str, idempotency_key: str) -> Found | NoVerdict:
        """The task made for this batch and key, looked for in the upstream's listing."""
        ...

    async def submit(
        self, submission_id: str, batch_ids: Sequence[str], idempotency_key: str
    ) -> Created:
        """Create (and pay for) a submission's job, one request line per batch, each the
        batch's request as the ledger holds it (read a chunk at a time, never all at once);
        raises as `create` does."""
        ...

    async def wait_job(
        self,
        submission_id: str,
        job_id: str,
        batch_ids: Sequence[str],
        seconds: float,
        followed_for: float = 0.0,
    ) -> JobLook:
        """Look at the job until it ends or `seconds` pass: ended (each batch's line), or no
        verdict, as soon as one look gives either. `followed_for`: how long the job has been
        followed before this call (a job followed for long is looked at less often)."""
        ...

    async def find_job(self, wanted: JobWanted) -> Found | NoVerdict:
        """The job made for this submission, looked for in the upstream's listing."""
        ...
