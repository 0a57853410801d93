"""What the simulator's Message Batches routes share: the batches they keep between requests,
the upstream and faults they charge and fault through, and how they check a key and find a
batch.

One `AnthropicBatchState` is made per app (`simulator.anthropic_batches`) and handed to its
routes and to `simulator.anthropic_batch_output`, so that a poll, a results download, a
cancel and the listing all see the batch a create made. What a batch's requests answer is
kept on disk (`spool`), not in memory: a month's batch is 20 000 requests of 25 posts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi import Request, Response

from simulator.anthropic_api import anthropic_error
from simulator.faults import Faults
from simulator.spool import Spool
from simulator.task import SimTask
from simulator.upstream import Upstream


@dataclass
class BatchRequest:
    custom_id: str
    task: SimTask  # its posts and output are not kept: its answer is on disk (`answers`)
    tool: str | None
    fate: str = "succeeded"  # or errored, expired, canceled


@dataclass
class MessageBatch:
    id: str
    requests: list[BatchRequest]  # the requests run so far, in order
    count: int  # how many its create listed
    created_at: datetime  # UTC, microseconds: strictly later than the batch made before it
    started: float  # monotonic, at `created_at`: what its later instants are counted from
    cancel_at: float | None = None  # monotonic, when a cancel was asked
    # The results line of each request that runs, in order, written as it was made (its
    # message does not change later); until its results are written.
    answers: Path | None = None
    results: Path | None = None  # its results file, once written
    counts: dict[str, int] | None = None  # its results by type, once written
    # Every request it listed has been run (a create answers before they are, as Anthropic's
    # does: a month's body is 100 000 requests, tens of seconds of the simulator's work).
    all_run: bool = False

    def ended(self, now: float) -> bool:
        if not self.all_run:
            return False
        return self.cancel_at is not None or all(now >= r.task.done_at for r in self.requests)

    def wall(self, monotonic: float) -> datetime:
        """The UTC time of a monotonic instant of its life (its end, its cancel)."""
        return self.created_at + timedelta(seconds=monotonic - self.started)


@dataclass
class AnthropicBatchState:
    """One app's Message Batches, and what its batch routes charge and check."""

    upstream: Upstream
    faults: Faults
    key_matches: Callable[[str], bool]
    spool: Spool  # where its batches' answers and results are
    # In the order they were made (the listing's ties, were there any, go by it).
    batches: dict[str, MessageBatch] = field(default_factory=dict)
    last_created: datetime | None = None
    # The background work running the requests of batches whose create has answered.
    running: set[asyncio.Task[None]] = field(default_factory=set)

    def created_now(self) -> datetime:
        """A new batch's `created_at`: now, or a microsecond after the last one's, so that two
        batches made within the clock's resolution are still ordered as they were made."""
        now = datetime.now(UTC)
        if self.last_created is not None and now <= self.last_created:
            now = self.last_created + timedelta(microseconds=1)
        self.last_created = now
        return now

    def forget_all(self) -> None:
        """Forget every batch (`POST /_sim/reset`)."""
        for work in self.running:
            work.cancel()
        self.running.clear()
        self.batches.clear()
        self.spool.clear()

    def denied(self, request: Request) -> Response | None:
        """The 401 of a request without the key (in `x-api-key`, or as a Bearer token)."""
        given = request.headers.get("x-api-key") or request.headers.get(
            "authorization", ""
        ).removeprefix("Bearer ")
        if self.key_matches(given):
            return None
        return anthropic_error(401, "authentication_error", "invalid x-api-key")

    def found(self, request: Request, batch_id: str) -> MessageBatch | Response:
        """The batch a request names, or its refusal: the 401 first, then the 404."""
        if (refusal := self.denied(request)) is not None:
            return refusal
        batch = self.batches.get(batch_id)
        if batch is None:
            return anthropic_error(404, "not_found_error", f"No batch with id {batch_id!r}")
        return batch
