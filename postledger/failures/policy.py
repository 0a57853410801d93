"""The business layer (R11–R17): what happens to a batch's posts after each kind of outcome.

Plain functions over records and facts: they decide, the ledger applies the decision in one
transaction. Request retries (transport faults) have already been spent by the time these
run; what is decided here is a new *business* attempt, a wait, a split, or an end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from postledger.batches.output import OutputCheck
from postledger.failures.hints import CONTINUE_HINTS
from postledger.guards.breaker import Signal
from postledger.record.kinds import BatchStatus, FailureKind, PostStatus
from postledger.settings import Limits

if TYPE_CHECKING:
    from postledger.record.models import BatchRecord, PostRecord


class Reach(StrEnum):
    """Whether a failed create may have made (and charged) an upstream task."""

    NEVER = "never"  # no connection was made, or the upstream refused the request
    MAYBE = "maybe"  # sent, and no usable answer came back


@dataclass(frozen=True)
class Failure:
    """A classified failure of one batch's upstream calls."""

    kind: FailureKind
    reason: str
    reach: Reach = Reach.MAYBE
    retry_after: float | None = None
    # The request could not be made as configured (a wrong base URL, no upstream): nothing was
    # charged, the posts wait for the fix, and the run stops with what to change.
    misconfigured: bool = False
    # The upstream said the failed task was not billed: its charge is given back (the attempt
    # still counts against the cap).
    unbilled: bool = False


@dataclass(frozen=True)
class PostMove:
    post_id: str
    to: PostStatus
    why: str
    kind: FailureKind | None = None
    not_before: datetime | None = None
    refund: bool = False  # the attempt counted before the call was certainly not charged
    requeue: bool = False  # an unpaid business retry


@dataclass(frozen=True)
class Decision:
    """What happens to a batch and its posts. `batch_to` running means *uncertain*: the
    upstream may have made (and charged) the work, and may still deliver it, so nothing is
    final: the batch and its posts stay running for recovery to poll or, with a person's yes,
    resubmit."""

    batch_to: BatchStatus
    why: str
    kind: FailureKind | None = None
    moves: list[PostMove] = field(default_factory=list)
    halves: list[list[str]] = field(default_factory=list)  # new batches to plan (R12)
    batch_not_before: datetime | None = None  # when batch_to is queued: not before this
    # This send's possible charge goes back (the upstream never took it, or said it did not
    # bill it); the batch's own charge goes back to none too when no earlier send may have
    # been charged (its first send).
    nothing_charged: bool = False
    stop_run: str | None = None  # R14: no further batch may start in this run; what to fix
    signal: Signal | None = None  # what the outcome tells the upstream's breaker (R18)

    @property
    def uncertain(self) -> bool:
        return self.batch_to is BatchStatus.RUNNING


STOPPING = frozenset({FailureKind.AUTH, FailureKind.QUOTA, FailureKind.PERMISSION})


def attempt_cap(post: PostRecord, limits: Limits) -> int:
    """The paid attempts this post may have: the limit, plus what a person allowed beyond it
    (R38)."""
    return limits.max_attempts + post.extra_attempts


def retry_or_fail(post: PostRecord, why: str, kind: FailureKind, limits: Limits) -> PostMove:
    """A paid business retry (a new batch) while the post has attempts left (R15)."""
    if post.attempts >= attempt_cap(post, limits):
        return PostMove(
            post.post_id,
            PostStatus.FAILED,
            f"{why} (after {post.attempts} paid attempts, the limit)",
            kind=FailureKind.ATTEMPTS_EXHAUSTED,
        )
    return PostMove(post.post_id, PostStatus.PENDING, f"{why}: business retry", kind=None)


def after_output(
    batch: BatchRecord, posts: list[PostRecord], check: OutputCheck, limits: Limits
) -> Decision:
    """R12 and R13: a saved output was checked. The upstream delivered: a breaker success."""
    return replace(_after_output(batch, posts, check, limits), signal=Signal.SUCCESS)


def _after_output(
    batch: BatchRecord, posts: list[PostRecord], check: OutputCheck, limits: Limits
) -> Decision:
    if check.unusable is not None:
        return _after_unusable(check.unusable, posts, limits)
    moves = []
    for post in posts:
        if post.post_id in check.valid:
            moves.append(PostMove(post.post_id, PostStatus.COMPLETED, "validated and saved"))
        else:
            reason = check.invalid.get(post.post_id, "the output has no item for this post")
            kind = FailureKind.MISSING_ITEM if "no item" in reason else FailureKind.INVALID_ITEM
            moves.append(retry_or_fail(post, reason, kind, limits))
    return Decision(
        BatchStatus.COMPLETED,
        f"{len(check.valid)} completed, {len(posts) - len(check.valid)} invalid",
        moves=moves,
    )


def _after_unusable(unusable: str, posts: list[PostRecord], limits: Limits) -> Decision:
    """R12, R15, R40: the whole output was unusable. Posts never split before are split into two
    halves, once per lineage (the mark is on the post, so it survives replanning and
    restarts); posts split before, or with no paid attempt left, end here."""
    capped = [p for p in posts if p.attempts >= attempt_cap(p, limits)]
    fresh = [p for p in posts if p not in capped and not p.split]
    halves: list[list[str]] = []
    if len(fresh) > 1:
        half = len(fresh) // 2
        halves = [[p.post_id for p in fresh[:half]], [p.post_id for p in fresh[half:]]]
    in_halves = {post_id for half in halves for post_id in half}
    moves = [
        PostMove(
            p.post_id,
            PostStatus.FAILED,
            f"{unusable} (after {p.attempts} paid attempts, the limit)",
            FailureKind.ATTEMPTS_EXHAUSTED,
        )
        if p in capped
        else PostMove(p.post_id, PostStatus.FAILED, unusable, FailureKind.BATCH_INVALID)
        for p in posts
        if p.post_id not in in_halves
    ]
    why = unusable
    if halves:
        why += f"; split into halves of {len(halves[0])} and {len(halves[1])}"
    return Decision(
        BatchStatus.FAILED, why, kind=FailureKind.BATCH_INVALID, moves=moves, halves=halves
    )


def uncertain(failure: Failure, why: str, stop_run: str | None = None) -> Decision:
    """The batch's outcome is not known: it stays running, its posts too, until the upstream
    says what became of it (a poll) or a person decides (a resubmission) (R48)."""
    return Decision(BatchStatus.RUNNING, why, kind=failure.kind, stop_run=stop_run)


def after_failure(
    batch: BatchRecord,
    posts: list[PostRecord],
    failure: Failure,
    *,
    idempotent: bool,
    limits: Limits,
    now: datetime,
) -> Decision:
    """R10, R11, R14, R17, R26: the batch's create ended without a task or an answer (what a
    look at made work says is decided in `verdicts.py`). A final transport failure also
    counts against the upstream's breaker (R18)."""
    decision = _after_failure(batch, posts, failure, idempotent=idempotent, limits=limits, now=now)
    if failure.kind is FailureKind.TRANSPORT:
        return replace(decision, signal=Signal.TRANSPORT_FAILURE)
    return decision


def _after_failure(
    batch: BatchRecord,
    posts: list[PostRecord],
    failure: Failure,
    *,
    idempotent: bool,
    limits: Limits,
    now: datetime,
) -> Decision:
    # A send that certainly never reached the upstream cost nothing, and is given back: its
    # possible charge, and its attempt. Under a key the upstream honours, a later send is the
    # first send's own attempt again, which may have been charged: only the first is given
    # back. Elsewhere each send is its own attempt (and its own possible charge).
    refundable = (
        failure.reach is Reach.NEVER
        and not batch.upstream_task_id
        and (batch.sends == 1 or not idempotent)
    )
    task_id = batch.upstream_task_id
    stop = _stop_for(failure)

    if task_id and failure.kind not in (FailureKind.TASK_UNKNOWN, FailureKind.UPSTREAM_FAILED):
        # R23: the task was made and paid for, and only the upstream can say it is over: a
        # poll that failed (for good, for now, or past our deadline) leaves it to recovery.
        why = f"{failure.reason}; task {task_id} may still deliver: a later run polls it"
        return uncertain(failure, why, stop)

    if failure.misconfigured and refundable:
        # Nothing left as configured: the posts wait, unpaid, for the fix.
        return Decision(
            BatchStatus.FAILED,
            failure.reason,
            kind=failure.kind,
            moves=[
                PostMove(p.post_id, PostStatus.PENDING, f"{failure.reason}: not sent", refund=True)
                for p in posts
            ],
            nothing_charged=True,
            stop_run=stop,
        )

    if failure.kind in STOPPING and failure.reach is Reach.NEVER:
        return Decision(
            BatchStatus.FAILED,
            failure.reason,
            kind=failure.kind,
            moves=[
                PostMove(
                    p.post_id, PostStatus.FAILED, failure.reason, failure.kind, refund=refundable
                )
                for p in posts
            ],
            nothing_charged=refundable,
            stop_run=stop,
        )

    if failure.kind is FailureKind.TASK_UNKNOWN:
        # R26: never answered with a silent new task.
        why = f"{failure.reason}: the upstream no longer knows task {task_id}"
        return Decision(
            BatchStatus.FAILED,
            why,
            kind=failure.kind,
            moves=[PostMove(p.post_id, PostStatus.FAILED, why, failure.kind) for p in posts],
        )

    if failure.kind is FailureKind.UPSTREAM_FAILED:
        # The upstream said the work failed: paid for (unless it said otherwise), and worth
        # one more attempt.
        return Decision(
            BatchStatus.FAILED,
            failure.reason,
            kind=failure.kind,
            moves=[retry_or_fail(p, failure.reason, failure.kind, limits) for p in posts],
            nothing_charged=failure.unbilled,
        )

    wait = _wait_seconds(failure, limits)
    if refundable:
        # Nothing was charged: the posts leave this batch and are planned again later.
        target = (
            PostStatus.WAITING if failure.kind is FailureKind.RATE_LIMITED else PostStatus.PENDING
        )
        moves = [_bounce(p, target, failure, now + timedelta(seconds=wait), limits) for p in posts]
        return Decision(
            BatchStatus.FAILED,
            failure.reason,
            kind=failure.kind,
            moves=moves,
            nothing_charged=True,
            stop_run=stop,
        )

    if idempotent and not stop and posts and all(p.requeues < limits.max_requeues for p in posts):
        # The upstream may hold this task already: send the same key again, which is answered
        # with that task at no new charge, or makes it once if it never arrived.
        not_before = now + timedelta(
            seconds=wait if failure.kind is FailureKind.RATE_LIMITED else 0
        )
        return Decision(
            BatchStatus.QUEUED,
            f"{failure.reason}; sent again later with the same idempotency key",
            moves=[
                PostMove(
                    p.post_id,
                    PostStatus.QUEUED,
                    f"{failure.reason}: same batch again",
                    requeue=True,
                )
                for p in posts
            ],
            batch_not_before=not_before,
        )

    # R24: the create may have reached the upstream, which may have made and charged it.
    # Uncertain, not failed: recovery looks for it, or asks a person before sending it again.
    why = f"{failure.reason}; the upstream may have made and charged it" + (
        ""
        if idempotent
        else ", and it does not honour idempotency keys: not sent again without a yes"
    )
    return uncertain(failure, why, stop)


def _stop_for(failure: Failure) -> str | None:
    """What a person must fix before anything more is sent, for the failures that stop a run."""
    if failure.misconfigured:
        return f"{failure.reason}. Nothing more is sent until the configuration is fixed."
    if failure.kind in STOPPING:
        return f"{failure.kind.value}: {failure.reason} — {CONTINUE_HINTS[failure.kind]}"
    return None


def _wait_seconds(failure: Failure, limits: Limits) -> float:
    if failure.retry_after is None:
        return limits.default_wait
    return min(max(failure.retry_after, 0.0), limits.max_wait)


def _bounce(
    post: PostRecord, target: PostStatus, failure: Failure, not_before: datetime, limits: Limits
) -> PostMove:
    if post.requeues >= limits.max_requeues:
        return PostMove(
            post.post_id,
            PostStatus.FAILED,
            f"{failure.reason} (sent back {post.requeues} times without success)",
            kind=failure.kind,
            refund=True,
        )
    return PostMove(
        post.post_id,
        target,
        f"{failure.reason}: not charged, "
        + (
            f"waiting until {not_before:%H:%M:%S} UTC"
            if target is PostStatus.WAITING
            else "planned again"
        ),
        not_before=not_before if target is PostStatus.WAITING else None,
        refund=True,
        requeue=True,
    )
