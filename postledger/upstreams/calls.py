"""What a call to an upstream gives, the same for every upstream kind: the request, the made
task, and what one look at paid work can say.

A look says one of three things, each its own type:

- the work is still going (`Running`);
- the upstream's verdict on it (`Verdict`): an output (`Delivered`), "failed" (`UpstreamFailed`,
  billed or not as the provider documents it; an expired or cancelled request is one that
  never ran), or "I do not know this id" (`Unknown`). Only a verdict ends a paid batch;
- no verdict (`NoVerdict`): the look could not be made or could not be read (a transport
  fault, a body that is not the answer, results that are cut or lack a line, a refused read,
  our own deadline). It says nothing about the work, which may have been done and paid for:
  the batch waits, with its id, for the next look (docs/rules.md, R48).

The adapters (`task_api`, `openai_batch`, `anthropic_batch`, ...) return these types; the
business layer decides from the type, never from where an exception came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from postledger.analysis import Analysis
    from postledger.upstreams.errors import RejectedError


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class Running:
    """The work is still going upstream: no verdict yet, and nothing is wrong. `counts`: the
    upstream's own count of a job's requests by state, when it gives one (Batch APIs)."""

    status: TaskStatus = TaskStatus.RUNNING
    counts: dict[str, int] | None = None


@dataclass(frozen=True)
class Delivered:
    """The upstream delivered an output: saved first, then checked (R4)."""

    output: str
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class UpstreamFailed:
    """The upstream says the work ended without an output. `billed` is False only where the
    provider documents that such work is not billed (a request that never ran: expired or
    cancelled first; Anthropic's errored requests). `usage`: what the upstream reported it
    used anyway, booked as it is."""

    reason: str
    billed: bool = True
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class Unknown:
    """The upstream says it does not know this id (any more): a 404 on a read of it (R26)."""

    reason: str


Verdict = Delivered | UpstreamFailed | Unknown


class NoVerdictReason(StrEnum):
    """Why a look gave no verdict. None of these says anything about the paid work."""

    TRANSPORT = "transport"  # no answer, or a 5xx, after the request retries
    NOT_THE_ANSWER = "not_the_answer"  # not JSON, cut short, the wrong shape, an odd status
    RESULTS_INCOMPLETE = "results_incomplete"  # a results file cut short, or lacking a line
    REFUSED = "refused"  # the read itself was refused (401, 403, 429, another 4xx)
    DEADLINE = "deadline"  # our own deadline passed while the work was still going
    # A listed job that may be the one looked for is still running: only its results can
    # say whether it is (Anthropic's Message Batches, found by what they carry).
    UNCONFIRMED = "unconfirmed"


@dataclass(frozen=True)
class NoVerdict:
    """A look that gave no verdict; `detail` says what was seen, in words. `refusal`: the
    refusal of a refused read (its status and body: a wrong key stops the run, a rate limit
    is waited out). `retry_after`: the wait the upstream asked for, if it asked."""

    reason: NoVerdictReason
    detail: str
    refusal: RejectedError | None = None
    retry_after: float | None = None


Look = Running | Delivered | UpstreamFailed | Unknown | NoVerdict


@dataclass(frozen=True)
class JobEnded:
    """A job that ended upstream, each ledger batch's line read as that batch's own result:
    a verdict, or no verdict (its line is missing, or the file was cut). From a Batch API,
    `lines` reads each batch's line from the results file on disk when it is asked for
    (`job_files.LinesRead`): iterate it once, a batch at a time."""

    lines: Mapping[str, Verdict | NoVerdict]


JobLook = Running | JobEnded | Unknown | NoVerdict


@dataclass(frozen=True)
class CreateRequest:
    """One ledger batch's paid request, the same for every upstream."""

    batch_id: str
    model: str
    analysis: Analysis
    posts: Sequence[tuple[str, str]]  # (post id, text)
    idempotency_key: str


@dataclass(frozen=True)
class Created:
    """What a create call gave: the upstream task's id, or (from an upstream that answers at
    once and keeps no task) the answer itself: an output, or the upstream's "failed"."""

    task_id: str | None
    finished: Delivered | UpstreamFailed | None = None
    # Retries a gateway in front of the upstream reported making on its own for this create
    # (`x-litellm-attempted-retries`): each may have been charged.
    gateway_retries: int = 0
    file_id: str | None = None  # the uploaded input file a Batch API job was made from


@dataclass(frozen=True)
class JobRequest:
    """A submission's paid upstream job on a Batch API: one request line per ledger batch
    (`custom_id` = the batch id), all under one model and analysis. `lines` are read once,
    as the job's file is written (from the ledger, a chunk of batches at a time)."""

    submission_id: str
    model: str
    analysis: Analysis
    lines: Iterable[tuple[str, Sequence[tuple[str, str]]]]  # (batch id, its (post id, text))
    idempotency_key: str


@dataclass(frozen=True)
class JobWanted:
    """A submission whose job's id was never saved, as the ledger knows it: what a search of
    the upstream's listing looks for. The job, if it was made, was made after the submission
    was written down (`written_at`, on our clock) and before the search."""

    submission_id: str
    idempotency_key: str
    batch_ids: tuple[str, ...]
    written_at: datetime


@dataclass(frozen=True)
class Found:
    """What a search of the upstream's listing found: the id of the work made under a key,
    or None when the listing (read whole, as far as it is searched) has none."""

    task_id: str | None
    by: str = "by its metadata"  # how it was told to be the one, for the adoption's event
