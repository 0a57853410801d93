"""What a call to an upstream gives, the same for every upstream kind: the request, the made
task, and a snapshot of it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class TaskSnapshot:
    task_id: str | None  # None: the upstream keeps no task (a synchronous call's answer)
    status: TaskStatus
    output: str | None
    usage: dict[str, Any] | None
    error: str | None
    # False: the upstream says this failed task was not billed (taken as billed otherwise).
    billed: bool = True

    @property
    def done(self) -> bool:
        return self.status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED)


@dataclass(frozen=True)
class CreateRequest:
    """One ledger batch's paid request, the same for every upstream."""

    batch_id: str
    model: str
    prompt: str
    posts: Sequence[tuple[str, str]]  # (post id, text)
    idempotency_key: str


@dataclass(frozen=True)
class Created:
    """What a create call gave: the upstream task's id, or — from an upstream that answers
    at once and keeps no task — the finished result itself."""

    task_id: str | None
    finished: TaskSnapshot | None = None
    # Retries a gateway in front of the upstream reported making on its own for this create
    # (`x-litellm-attempted-retries`): each may have been charged.
    gateway_retries: int = 0
