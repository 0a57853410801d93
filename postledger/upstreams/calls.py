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
    file_id: str | None = None  # the uploaded input file a Batch API job was made from


@dataclass(frozen=True)
class JobRequest:
    """A submission's paid upstream job on a Batch API: one request line per ledger batch
    (`custom_id` = the batch id), all under one model and prompt."""

    submission_id: str
    model: str
    prompt: str
    lines: Sequence[tuple[str, Sequence[tuple[str, str]]]]  # (batch id, its (post id, text))
    idempotency_key: str


@dataclass(frozen=True)
class JobSnapshot:
    """An upstream job as last seen: still going, or ended with each ledger batch's line as
    that batch's own result (`TaskSnapshot`, the same as a one-batch task's)."""

    job_id: str
    status: TaskStatus
    lines: dict[str, TaskSnapshot]  # by ledger batch id; every batch asked for, once done

    @property
    def done(self) -> bool:
        return self.status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED)
