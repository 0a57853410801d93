"""One simulated task: what a request made upstream, from its creation to its end, and what
it used (its tokens, by class: `usage`).

Apart from `simulator.upstream`, which keeps the tasks, their charges and the cache: a task
is what the faces read (its state, its output, its usage) to answer in their own words.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from simulator.billing import Usage
from simulator.caching import NO_CACHE, CacheUse


class TaskState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass
class SimTask:
    task_id: str
    idempotency_key: str | None
    model: str
    prompt: str
    posts: list[tuple[str, str]]
    created: float  # monotonic seconds
    done_at: float
    output: str
    input_tokens: int
    output_tokens: int
    error: str | None = None
    # The item schema the request asked its answer in (`simulator.analyses`; None: the
    # default analysis): a repeat under the same key must ask the same, and output faults
    # spoil an answer in its shape.
    schema: dict[str, Any] | None = None
    # What its input read from the prompt cache and wrote to it (`input_tokens` counts both).
    cached: CacheUse = NO_CACHE

    def usage(self) -> Usage:
        """Its usage by class of token: the input neither read nor written apart."""
        read, written = self.cached.read, self.cached.written
        return Usage(self.input_tokens - read - written, self.output_tokens, read, written)

    def state(self, now: float) -> TaskState:
        if now >= self.done_at:
            return TaskState.FAILED if self.error else TaskState.SUCCEEDED
        # The first tenth of the latency is spent waiting for a worker, as real services do.
        queued_until = self.created + (self.done_at - self.created) / 10
        return TaskState.QUEUED if now < queued_until else TaskState.RUNNING


async def until_done(task: SimTask) -> None:
    """Wait out a task's latency, and any hold on it (a synchronous answer waits for it)."""
    while task.done_at == math.inf:
        await asyncio.sleep(0.05)
    await asyncio.sleep(max(0.0, task.done_at - time.monotonic()))
