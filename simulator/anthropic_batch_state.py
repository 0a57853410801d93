"""What the simulator's Message Batches routes share: the batches they keep between requests,
the upstream and faults they charge and fault through, and how they check a key and find a
batch.

One `AnthropicBatchState` is made per app (`simulator.anthropic_batches`) and handed to its
routes and to `simulator.anthropic_batch_output`, so that a poll, a results download and a
cancel all see the batch a create made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fastapi import Request, Response

from simulator.anthropic_api import anthropic_error
from simulator.faults import Faults
from simulator.upstream import SimTask, Upstream


@dataclass
class BatchRequest:
    custom_id: str
    task: SimTask
    tool: str | None
    fate: str = "succeeded"  # or errored, expired, canceled


@dataclass
class MessageBatch:
    id: str
    requests: list[BatchRequest]
    created_at: datetime
    cancel_at: float | None = None  # monotonic, when a cancel was asked
    results: list[dict[str, Any]] = field(default_factory=list)

    def ended(self, now: float) -> bool:
        return self.cancel_at is not None or all(now >= r.task.done_at for r in self.requests)


@dataclass
class AnthropicBatchState:
    """One app's Message Batches, and what its batch routes charge and check."""

    upstream: Upstream
    faults: Faults
    key_matches: Callable[[str], bool]
    batches: dict[str, MessageBatch] = field(default_factory=dict)

    def forget_all(self) -> None:
        """Forget every batch (`POST /_sim/reset`)."""
        self.batches.clear()

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
