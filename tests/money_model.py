"""The pieces of the money model (`tests/test_money_model.py`) that are not the machine itself:
a small in-test upstream with its own charge log, the outputs it writes, the real upstream
error objects it raises, and a fresh ledger per Hypothesis example.

The model upstream plays the part of the paid AI as `simulator/upstream.py` does, without
HTTP: a create that reaches it makes (and charges) a task, unless it honours idempotency keys
and knows the key already; it remembers which batch, key, send and posts it charged.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import postledger.upstreams.errors as upstream_module
from postledger.failures.classify import failure_of
from postledger.failures.policy import Failure, Reach
from postledger.guards.spend import OUTPUT_TOKENS_PER_POST, tokens_of
from postledger.ledger import Ledger
from postledger.record.models import FailureKind
from postledger.upstreams.errors import (
    AmbiguousCreate,
    RejectedError,
    TaskStillRunning,
    TaskUnknownError,
    TransportError,
    UpstreamError,
)
from tests.helpers import LEDGER_ON_POSTGRES, PG_ADMIN_URL, fresh_ledger_database

PROMPT = "Classify each post: category, sentiment, one sentence."


class TaskOutcome(StrEnum):
    """What the upstream made of a task, decided once per task (as the simulator does)."""

    GOOD = "good"  # every item valid
    PARTLY_INVALID = "partly_invalid"  # some items invalid
    UNUSABLE = "unusable"  # the whole output is not usable
    FAILED = "failed"  # the task ended failed, no output


@dataclass
class ModelTask:
    task_id: str
    key: str
    batch_id: str
    request: list[tuple[str, str]]
    outcome: TaskOutcome | None = None  # None: still running upstream
    forgotten: bool = False  # the upstream lost it (its charge stays)


@dataclass(frozen=True)
class ModelCharge:
    """One charge in the model upstream's log (like the simulator's /_sim/charges)."""

    task_id: str
    key: str
    batch_id: str
    send: int  # the batch's `sends` when the create that made this charge was sent
    post_ids: tuple[str, ...]


@dataclass
class ModelUpstream:
    honour_keys: bool
    tasks: dict[str, ModelTask] = field(default_factory=dict)
    by_key: dict[str, str] = field(default_factory=dict)
    charges: list[ModelCharge] = field(default_factory=list)
    creates: int = 0  # creates that reached it (charged or not)
    _next: int = 0

    def create(
        self, batch_id: str, key: str, send: int, request: list[tuple[str, str]]
    ) -> tuple[ModelTask, bool]:
        """A create that reached the upstream and was accepted: its task, and whether it was
        charged now. A known key (when keys are honoured) is answered with its task, free."""
        self.creates += 1
        if self.honour_keys and key in self.by_key:
            task = self.tasks[self.by_key[key]]
            assert task.request == request, (
                f"{batch_id}: the same idempotency key was sent with another request "
                f"({task.request} then {request}): an upstream would refuse it"
            )
            return task, False
        self._next += 1
        task = ModelTask(f"task-{self._next:04d}", key, batch_id, list(request))
        self.tasks[task.task_id] = task
        if self.honour_keys:
            self.by_key[key] = task.task_id
        self.charges.append(
            ModelCharge(task.task_id, key, batch_id, send, tuple(pid for pid, _ in request))
        )
        return task, True

    def refused(self) -> None:
        """A create that reached the upstream and was refused: nothing made, nothing charged."""
        self.creates += 1

    def forget(self, task_id: str) -> None:
        task = self.tasks[task_id]
        task.forgotten = True
        if self.by_key.get(task.key) == task_id:
            del self.by_key[task.key]

    def charges_per_post(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for charge in self.charges:
            for post_id in charge.post_ids:
                counts[post_id] = counts.get(post_id, 0) + 1
        return counts


def output_of(task: ModelTask) -> str:
    """The raw output the model upstream delivers for a task that ended with an output."""
    if task.outcome is TaskOutcome.UNUSABLE:
        return "I am sorry, I cannot classify these posts today."
    items = []
    for index, (post_id, _) in enumerate(task.request):
        bad = task.outcome is TaskOutcome.PARTLY_INVALID and index % 2 == 0
        items.append(
            {
                "id": post_id,
                "category": "bogus" if bad else "question",
                "sentiment": "neutral",
                "summary": f"A post ({post_id}).",
            }
        )
    return json.dumps(items)


def usage_of(task: ModelTask) -> dict[str, int]:
    """The usage the upstream reports: input as the estimate counts it, output below the
    estimate's typical answer (so a settled cost never exceeds its estimate)."""
    input_tokens = tokens_of(len(PROMPT)) + sum(tokens_of(len(text)) for _, text in task.request)
    return {
        "input_tokens": input_tokens,
        "output_tokens": OUTPUT_TOKENS_PER_POST * len(task.request) // 2,
    }


# --- the real error objects the upstream clients raise, and their classification ------------


class CreateFault(StrEnum):
    """How a create can end other than with a task id."""

    AMBIGUOUS = "ambiguous"  # sent, no answer: the upstream may have made and charged it
    NOT_SENT = "not_sent"  # no connection was made: certainly never arrived
    AUTH = "auth"  # 401
    QUOTA = "quota"  # 402
    PERMISSION = "permission"  # 403
    QUOTA_429 = "quota_429"  # 429 insufficient_quota: a quota, not a rate limit
    BAD_REQUEST = "bad_request"  # 400
    NOT_FOUND = "not_found"  # 404 on the create: a misconfigured base URL
    RATE_LIMITED = "rate_limited"  # 429, no usable Retry-After
    RATE_LIMITED_WAIT = "rate_limited_wait"  # 429 with a Retry-After


class PollFault(StrEnum):
    """How polling a saved task id can end without an output."""

    TRANSPORT = "transport"  # request retries exhausted while polling
    STILL_RUNNING = "still_running"  # our deadline passed, the task may still finish
    AUTH = "auth"  # a 401 on the poll: the task was made and paid, only the upstream knows


def create_error(fault: CreateFault, *, honour_keys: bool, retry_after: float) -> UpstreamError:
    """The error a create ends with, as the upstream clients raise it."""
    if fault is CreateFault.AMBIGUOUS:
        if honour_keys:
            return TransportError("read timeout after the request was sent", maybe_sent=True)
        return AmbiguousCreate("the create may have arrived; the upstream ignores keys")
    if fault is CreateFault.NOT_SENT:
        return TransportError("connection refused", maybe_sent=False)
    if fault is CreateFault.RATE_LIMITED:
        return RejectedError("429 too many requests", status=429, error_type="rate_limit")
    if fault is CreateFault.RATE_LIMITED_WAIT:
        return RejectedError(
            "429 too many requests",
            status=429,
            error_type="rate_limit_exceeded",
            retry_after=retry_after,
        )
    statuses = {
        CreateFault.AUTH: (401, "invalid_api_key"),
        CreateFault.QUOTA: (402, "payment_required"),
        CreateFault.PERMISSION: (403, "model_not_allowed"),
        CreateFault.QUOTA_429: (429, "insufficient_quota"),
        CreateFault.BAD_REQUEST: (400, "invalid_request"),
        CreateFault.NOT_FOUND: (404, "not_found"),
    }
    status, error_type = statuses[fault]
    if fault is CreateFault.NOT_FOUND and _ENDPOINT_NOT_FOUND is not None:
        return _ENDPOINT_NOT_FOUND(
            "404 on POST /v1/tasks: check POSTLEDGER_UPSTREAM_URL", status=404, error_type=None
        )
    return RejectedError(f"{status} {error_type}", status=status, error_type=error_type)


# The upstream clients' "404 on a call that names no task" (newer than some checkouts).
_ENDPOINT_NOT_FOUND: type[RejectedError] | None = getattr(upstream_module, "EndpointNotFound", None)

EXPECTED_KIND = {
    CreateFault.AMBIGUOUS: FailureKind.TRANSPORT,
    CreateFault.NOT_SENT: FailureKind.TRANSPORT,
    CreateFault.AUTH: FailureKind.AUTH,
    CreateFault.QUOTA: FailureKind.QUOTA,
    CreateFault.PERMISSION: FailureKind.PERMISSION,
    CreateFault.QUOTA_429: FailureKind.QUOTA,
    CreateFault.BAD_REQUEST: FailureKind.REJECTED,
    CreateFault.NOT_FOUND: FailureKind.REJECTED,
    CreateFault.RATE_LIMITED: FailureKind.RATE_LIMITED,
    CreateFault.RATE_LIMITED_WAIT: FailureKind.RATE_LIMITED,
}


def create_failure(fault: CreateFault, *, honour_keys: bool, retry_after: float) -> Failure:
    """The classified failure of a create, through `failure_of` on the real error object
    (the 404 is built by hand where the clients have no error class for it yet)."""
    if fault is CreateFault.NOT_FOUND and _ENDPOINT_NOT_FOUND is None:
        return Failure(
            FailureKind.REJECTED,
            "404 on POST /v1/tasks: check POSTLEDGER_UPSTREAM_URL",
            Reach.NEVER,
            misconfigured=True,
        )
    failure = failure_of(create_error(fault, honour_keys=honour_keys, retry_after=retry_after))
    assert failure.kind is EXPECTED_KIND[fault], (fault, failure)
    never = fault is not CreateFault.AMBIGUOUS
    assert (failure.reach is Reach.NEVER) is never, (fault, failure)
    assert failure.misconfigured is (fault is CreateFault.NOT_FOUND), (fault, failure)
    return failure


def poll_error(fault: PollFault) -> UpstreamError:
    if fault is PollFault.TRANSPORT:
        return TransportError("502 bad gateway while polling", maybe_sent=True, status=502)
    if fault is PollFault.STILL_RUNNING:
        return TaskStillRunning("the task did not end before our deadline")
    return RejectedError("401 invalid api key", status=401, error_type="invalid_api_key")


def unknown_task_error(task_id: str) -> UpstreamError:
    return TaskUnknownError(f"404: no task {task_id}", status=404, error_type="not_found")


def failed_task_error(task_id: str) -> UpstreamError:
    """What `tasks/batch.py` raises when the task ended without an output."""
    return UpstreamError(f"the upstream task ended failed: {task_id} failed upstream")


# --- a fresh ledger per example ------------------------------------------------------------

_template: Path | None = None


def _sqlite_template() -> Path:
    """One migrated, empty SQLite ledger per process, copied for each example: migrating a
    new file takes ~0.4 s, copying it ~1 ms."""
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="postledger-money-template-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = folder / "template.db"
        Ledger(f"sqlite:///{path}").close()
        _template = path
    return _template


@contextmanager
def fresh_ledger_url() -> Iterator[str]:
    """A new, empty ledger: a SQLite file in a folder of its own, or (in the suite's
    PostgreSQL pass) a new database copied from a migrated template, dropped at exit."""
    if LEDGER_ON_POSTGRES:
        with fresh_ledger_database(PG_ADMIN_URL) as url:
            yield url
        return
    folder = Path(tempfile.mkdtemp(prefix="postledger-money-"))
    try:
        path = folder / "ledger.db"
        shutil.copyfile(_sqlite_template(), path)
        yield f"sqlite:///{path}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
