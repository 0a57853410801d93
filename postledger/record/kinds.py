"""The ledger's enums (what its rows can say), its clock and how it names a batch. Apart from
the tables (`models.py`) so that a reader that needs no ORM (`postledger status`) can use them
without importing SQLAlchemy."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum


def utcnow() -> datetime:
    return datetime.now(UTC)


def batch_id_for(month: str, seq: int) -> str:
    return f"{month}-b{seq:04d}"


def month_of(batch_id: str) -> str:
    return batch_id.split("-b", 1)[0]


# A post with a business retry or an unpaid requeue (one in a few hundred of a month, usually):
# what the partial index `ix_posts_retried` holds, and how a query asks for it (as written).
RETRIED = "attempts > 1 OR requeues > 0"


class PostStatus(StrEnum):
    """The seven states of a post (R1, docs/rules.md)."""

    PENDING = "pending"  # known, not yet scheduled
    QUEUED = "queued"  # in a batch waiting for a slot
    WAITING = "waiting"  # not before `not_before` (e.g. after a rate limit)
    RUNNING = "running"  # marked locally before the paid call; upstream may not have it (R6)
    RECEIVED = "received"  # raw output saved, not yet validated
    COMPLETED = "completed"  # validated and saved: the only state that counts as done (R29)
    FAILED = "failed"  # ended, with a kind and a reason


class BatchStatus(StrEnum):
    QUEUED = "queued"  # planned, never sent
    RUNNING = "running"  # marked before the paid call; may or may not exist upstream
    RECEIVED = "received"  # raw output saved
    COMPLETED = "completed"  # output checked; each post completed or failed with a reason
    FAILED = "failed"  # ended without usable output
    CANCELLED = "cancelled"  # planned, never sent (so never paid); its posts were planned again


class Charge(StrEnum):
    """What a batch's submission may have cost: the ledger's own view, kept honest."""

    NONE = "none"  # never reached the upstream, or refused by it: nothing was charged
    POSSIBLE = "possible"  # sent, outcome unknown: the upstream may have made (and charged) it
    CONFIRMED = "confirmed"  # the upstream answered with a task id: it was charged


class SpendState(StrEnum):
    """One paid submission, as far as the ledger can tell (what it may have cost)."""

    POSSIBLE = "possible"  # sent, outcome unknown: the charge may or may not have happened
    CONFIRMED = "confirmed"  # output received: charged, and the usage is known
    WASTED = "wasted"  # paid, but the output was unusable (or never came)
    REFUNDED = "refunded"  # the upstream certainly never took it: nothing was charged


class FailureKind(StrEnum):
    TOO_LONG = "too_long"  # a single post longer than max_batch_chars: never sent
    INVALID_ITEM = "invalid_item"  # the model's item for this post failed validation
    MISSING_ITEM = "missing_item"  # the output had no item for this post
    BATCH_INVALID = "batch_invalid"  # the whole output was unusable
    UPSTREAM_FAILED = "upstream_failed"  # the upstream task ended `failed`
    TASK_UNKNOWN = "task_unknown"  # the upstream no longer knows the saved task id
    TRANSPORT = "transport"  # request retries exhausted
    REJECTED = "rejected"  # the upstream refused the request itself (4xx other than below)
    RATE_LIMITED = "rate_limited"
    AUTH = "auth"  # credentials rejected
    QUOTA = "quota"  # out of balance
    PERMISSION = "permission"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    INPUT_CHANGED = "input_changed"  # a batch whose posts all changed before it came back (R25)


class BreakerLevel(StrEnum):
    """The circuit breaker of one upstream (R18): how many batches may be in flight."""

    NORMAL = "normal"  # the usual window (2)
    PROBE = "probe"  # one at a time: after one final transport failure, or a person's continue
    OPEN = "open"  # nothing new starts until a person says continue (R19)


class Question(StrEnum):
    """What a paused run asks a person."""

    BREAKER = "breaker"  # the breaker is open: continue or stop (R19)
    RECOVERY = "recovery"  # interrupted batches: poll known tasks, resubmit unknown ones (R22-R24)
    BUDGET = "budget"  # the next batch would cross the month's max_cost: go on or stop


class Answer(StrEnum):
    """How a question put to a person (a paused run) ended."""

    CONTINUE = "continue"
    STOP = "stop"
    TIMED_OUT = "timed_out"  # nobody answered in time: treated as stop


class EntityKind(StrEnum):
    POST = "post"
    BATCH = "batch"
