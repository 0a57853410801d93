"""What the simulator's OpenAI routes share: the files and batches they keep between requests,
the upstream and faults they charge and fault through, and their common error answers.

One `OpenAIState` is made per app (`simulator.openai_api`) and handed to each resource's routes,
so that a batch can read the file it was made from and write its output files where
GET /v1/files finds them. Files are kept on disk, in the state's `spool` (named by their id),
never in memory: a month's input file is 200 MB.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request, Response

from simulator.faults import Faults
from simulator.openai_batch_lines import BatchLines
from simulator.responses import error
from simulator.spool import Spool
from simulator.task import SimTask, TaskState
from simulator.upstream import Upstream

# The task states after which a batch can no longer be cancelled.
ENDED_STATES = (TaskState.SUCCEEDED, TaskState.FAILED)


@dataclass
class SimFile:
    id: str
    filename: str
    purpose: str
    path: Path  # its bytes, on disk
    size: int
    created_at: int
    batch_id: str | None = None  # the batch whose output or error file it is

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.size,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


@dataclass
class SimBatch:
    id: str
    task: SimTask
    input_file_id: str
    completion_window: str
    metadata: dict[str, str]
    created_at: int
    fate: str = "completed"  # how it ends: completed, failed, expired, cancelled
    # Each request, in the input file's order: its custom_id (and no more: what its lines
    # hold is on disk, `lines`).
    requests: list[tuple[str, Sequence[str]]] = field(default_factory=list)
    json_mode: bool = True  # the requests asked for a JSON object (response_format)
    failed_request: str | None = None  # a request_error fault: this request fails
    spoiled_request: tuple[str, str] | None = None  # a whole-output fault: (request, fault)
    cancel_at: float | None = None  # monotonic, when a cancel was asked
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    # Why its input file failed validation, one item per bad line (`errors.data`).
    line_errors: list[dict[str, Any]] = field(default_factory=list)
    # The requests refused for their schema (`simulator.openai_strict`): never run, answered
    # with their 400 in the error file. By custom_id, OpenAI's message.
    refused: dict[str, str] = field(default_factory=dict)
    # What its lines hold (their posts' ids, token counts and answers), on disk; None for a
    # batch that never runs (it failed validation).
    lines: BatchLines | None = None

    def status(self, now: float) -> str:
        if self.cancel_at is not None and self.task.state(now) not in ENDED_STATES:
            return "cancelled" if now >= self.cancel_at + 0.05 else "cancelling"
        state = self.task.state(now)
        if state is TaskState.QUEUED:
            return "validating"
        if state is TaskState.RUNNING:
            return "in_progress"
        return self.fate


@dataclass
class OpenAIState:
    """One app's OpenAI files and batches, and what its OpenAI routes charge and check."""

    upstream: Upstream
    faults: Faults
    authorized: Callable[[Request], bool]
    spool: Spool  # where its files are
    files: dict[str, SimFile] = field(default_factory=dict)
    batches: dict[str, SimBatch] = field(default_factory=dict)
    # Re-entrant: finishing a batch, under this lock, adds its files under it again.
    lock: threading.RLock = field(default_factory=threading.RLock)

    def forget_all(self) -> None:
        """Forget every file and batch (`POST /_sim/reset`)."""
        with self.lock:
            self.files.clear()
            self.batches.clear()
            self.spool.clear()

    def add_file(
        self, filename: str, purpose: str, written: Path, size: int, batch_id: str | None = None
    ) -> SimFile:
        """A file of the bytes `written` holds, which it takes: moved to a name of its id."""
        file_id = new_id("file")
        path = written.rename(self.spool.path(f"{file_id}.jsonl"))
        made = SimFile(file_id, filename, purpose, path, size, int(time.time()), batch_id)
        with self.lock:
            self.files[made.id] = made
        return made

    def add_batch(self, batch: SimBatch) -> SimBatch:
        with self.lock:
            self.batches[batch.id] = batch
        return batch


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def denied() -> Response:
    return error(
        401, "invalid_request_error", "Incorrect API key provided.", code="invalid_api_key"
    )


def invalid(message: str, status: int = 400) -> Response:
    return error(status, "invalid_request_error", message)
