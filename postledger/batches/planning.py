"""Batch planning (R7): consecutive posts, at most N posts and C characters per batch.

`plan_batches` is a plain function of sizes; the functions below it carry a plan out in the
month's write transaction, and put posts back to be planned again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func
from sqlalchemy import select as sql_select
from sqlmodel import Session, select

from postledger.record.db import CHUNK, chunks, insert_many
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    EntityKind,
    FailureKind,
    PostRecord,
    PostStatus,
    batch_id_for,
    utcnow,
)
from postledger.record.reads import posts_in
from postledger.record.states import PostChange, Transitions


@dataclass(frozen=True)
class Sized:
    """What planning needs to know about a post."""

    post_id: str
    chars: int


@dataclass(frozen=True)
class BatchPlan:
    batches: list[list[str]] = field(default_factory=list)
    # Posts that alone exceed max_chars: they can never be sent, so they are never planned.
    too_long: list[Sized] = field(default_factory=list)


def plan_batches(posts: Sequence[Sized], *, max_posts: int, max_chars: int) -> BatchPlan:
    """Fill batches greedily in the given order; the same input always gives the same plan."""
    filler = BatchFiller(max_posts=max_posts, max_chars=max_chars)
    plan = BatchPlan()
    plan.batches.extend(filler.add(posts, plan.too_long))
    plan.batches.extend(filler.finish())
    return plan


class BatchFiller:
    """`plan_batches` a part of the posts at a time: the batch being filled is carried from
    one part to the next, so the batches are the same however the posts are cut."""

    def __init__(self, *, max_posts: int, max_chars: int) -> None:
        if max_posts < 1 or max_chars < 1:
            raise ValueError("max_posts and max_chars must be at least 1")
        self.max_posts, self.max_chars = max_posts, max_chars
        self._current: list[str] = []
        self._chars = 0

    def add(self, posts: Iterable[Sized], too_long: list[Sized]) -> list[list[str]]:
        """The batches these posts fill up (the last one stays open); those that alone
        exceed max_chars go to `too_long`."""
        full: list[list[str]] = []
        for post in posts:
            if post.chars > self.max_chars:
                too_long.append(post)
                continue
            if self._current and (
                len(self._current) == self.max_posts or self._chars + post.chars > self.max_chars
            ):
                full.append(self._current)
                self._current, self._chars = [], 0
            self._current.append(post.post_id)
            self._chars += post.chars
        return full

    def finish(self) -> list[list[str]]:
        """The open batch, if any."""
        last, self._current, self._chars = self._current, [], 0
        return [last] if last else []


@dataclass(frozen=True)
class PlannedBatch:
    """A batch as planned: in the ledger, `queued`, nothing of it sent."""

    batch_id: str
    seq: int  # its place in the month's start order
    post_ids: list[str]
    split_from: str | None = None  # the batch it is half of (R12)


@dataclass(frozen=True)
class PlanReport:
    # The batches planned, when the caller asked for them (`keep_batches`): a month's are
    # 40 000 lists of post ids.
    batches: list[PlannedBatch]
    too_long: int
    planned: int = 0  # how many batches were planned


# --- in the month's write transaction -----------------------------------------------------


def replan_unsent(session: Session, moves: Transitions, month: str) -> int:
    """Dissolve the month's batches that were planned but never sent: they cost nothing (R36).
    Returns the posts freed."""
    freed = 0
    for batch in session.exec(
        select(BatchRecord).where(
            BatchRecord.month == month,
            BatchRecord.status == BatchStatus.QUEUED,
            BatchRecord.sends == 0,
        )
    ):
        for post in posts_in(session, batch, PostStatus.QUEUED):
            moves.post(post, PostStatus.PENDING, f"batch {batch.batch_id} re-planned")
            post.batch_id = None
            freed += 1
        moves.batch(batch, BatchStatus.CANCELLED, "never sent; its posts were planned again")
    return freed


# Pending posts read per step of a plan, in file order: a plan holds a chunk of the month.
# Ten of the ledger's chunks: a pending post is four small columns here (~5 MB a chunk), and
# each step's statements (read, stage, move, log) cost PostgreSQL ~0.1-0.2 s whatever their
# size (5 000 a step: plan 8.8 s at 100 000 posts, against 3.4 s in one piece).
PLAN_CHUNK = 10 * CHUNK


def plan_pending(
    session: Session,
    moves: Transitions,
    month: str,
    *,
    max_posts: int,
    max_chars: int,
    max_attempts: int | None,
    keep_batches: bool = True,
) -> PlanReport:
    """The month's `pending` posts in new batches, in file order (R7); those too long, or
    with no paid attempt left (R15), end `failed`. In bulk and a chunk at a time: the pending
    posts are read `PLAN_CHUNK` at a time as four plain columns (never a post's text or
    record), and each chunk's full batches are written before the next is read."""
    filler = BatchFiller(max_posts=max_posts, max_chars=max_chars)
    kept: list[PlannedBatch] = []
    planned = too_long = 0
    for rows, last in _pending(session, month):
        sized: list[Sized] = []
        capped: dict[int, list[str]] = {}  # paid attempts made -> posts with none left
        for post_id, chars, attempts, extra_attempts in rows:
            if max_attempts is not None and attempts >= max_attempts + extra_attempts:
                capped.setdefault(attempts, []).append(post_id)
            else:
                sized.append(Sized(post_id, chars))
        _fail_capped(moves, capped)
        long: list[Sized] = []
        full = filler.add(sized, long) + (filler.finish() if last else [])
        _fail_too_long(moves, long, max_chars)
        too_long += len(long)
        batches = _write(session, moves, month, full)
        planned += len(batches)
        kept += batches if keep_batches else []
    return PlanReport(batches=kept, too_long=too_long, planned=planned)


def _pending(
    session: Session, month: str
) -> Iterator[tuple[list[tuple[str, int, int, int]], bool]]:
    """The month's pending posts (id, characters, attempts, extra attempts) in file order,
    `PLAN_CHUNK` at a time, and whether it is the last chunk: each read after the last post
    of the one before (by its place in the file and, for the rare posts of one place, its
    id), through the posts' index by status. Plain rows, not the ORM's."""
    c = PostRecord.__table__.c  # type: ignore[attr-defined]
    query = (
        sql_select(c.post_id, func.length(c.text), c.attempts, c.extra_attempts, c.position)
        .where(c.month == month, c.status == PostStatus.PENDING)
        .order_by(c.position, c.post_id)
        .limit(PLAN_CHUNK)
    )
    after = query
    while True:
        rows = session.connection().execute(after).all()
        yield [(row[0], row[1], row[2], row[3]) for row in rows], len(rows) < PLAN_CHUNK
        if len(rows) < PLAN_CHUNK:
            return
        last_id, last_place = rows[-1][0], rows[-1][4]
        # `position >=` first, for the index's range: the index by status still holds, on
        # PostgreSQL, the posts this plan moved on (dead until vacuumed), and a chunk read
        # from the range's start would walk them all again.
        after = query.where(
            c.position >= last_place,
            (c.position > last_place) | (c.post_id > last_id),
        )


def _fail_capped(moves: Transitions, capped: dict[int, list[str]]) -> None:
    for attempts, post_ids in capped.items():
        why = f"{attempts} paid attempts made, the limit: not sent again"
        moves.posts_by_id(
            PostStatus.PENDING,
            PostStatus.FAILED,
            [PostChange(post_id, why) for post_id in post_ids],
            failure=FailureKind.ATTEMPTS_EXHAUSTED,
        )


def _fail_too_long(moves: Transitions, posts: list[Sized], max_chars: int) -> None:
    too_long = [
        PostChange(
            post.post_id,
            f"the post has {post.chars} characters, more than max_batch_chars={max_chars}: it "
            "was never sent. Shorten it, or raise POSTLEDGER_MAX_BATCH_CHARS and run "
            "`postledger retry --kind too_long`",
        )
        for post in posts
    ]
    moves.posts_by_id(PostStatus.PENDING, PostStatus.FAILED, too_long, failure=FailureKind.TOO_LONG)


def _write(
    session: Session, moves: Transitions, month: str, groups: list[list[str]]
) -> list[PlannedBatch]:
    """The groups as new batches, their posts moved into them."""
    batches = new_batches(session, moves, month, groups)
    if batches:
        first, last = batches[0].seq, batches[-1].seq
        moves.posts_into_batches(first, last, sum(len(batch.post_ids) for batch in batches))
    return batches


def new_batches(
    session: Session,
    moves: Transitions,
    month: str,
    groups: list[list[str]],
    *,
    split_from: str | None = None,
) -> list[PlannedBatch]:
    """One queued batch per group of post ids, numbered after the month's last, each with an
    idempotency key of its own (R35). The caller moves the posts into them. In one bulk
    insert: a month is planned into thousands of batches at once."""
    last_seq = session.exec(
        select(func.max(BatchRecord.seq)).where(BatchRecord.month == month)
    ).one()
    now = utcnow()
    origin = f", half of {split_from}" if split_from else ""
    rows: list[dict[str, object]] = []
    planned: list[PlannedBatch] = []
    for offset, post_ids in enumerate(groups, start=1):
        seq = (last_seq or 0) + offset
        batch = PlannedBatch(batch_id_for(month, seq), seq, post_ids, split_from)
        # Every column, as the ORM would write a new BatchRecord (JSON nulls included).
        rows.append(
            {
                **_NEW_BATCH,
                "batch_id": batch.batch_id,
                "month": month,
                "seq": seq,
                "post_ids": post_ids,
                "split_from": split_from,
                "idempotency_key": f"postledger-{uuid.uuid4()}",
                "created_at": now,
                "updated_at": now,
            }
        )
        moves.created(
            EntityKind.BATCH,
            batch.batch_id,
            BatchStatus.QUEUED,
            f"planned with {len(post_ids)} posts{origin}",
        )
        planned.append(batch)
    table = BatchRecord.__table__  # type: ignore[attr-defined]
    for chunk in chunks(rows):
        insert_many(session.connection(), table, chunk)
    return planned


# What a new batch holds before anything of it is sent: the model's own defaults (the ones
# with a factory, its timestamps, are given per insert).
_NEW_BATCH: dict[str, object] = {
    name: field.default
    for name, field in BatchRecord.model_fields.items()
    if not field.is_required() and field.default_factory is None
}


def release_due(session: Session, moves: Transitions, month: str, now: datetime) -> int:
    """Posts whose wait is over back to `pending`, to be planned again (R11)."""
    due = [
        p
        for p in session.exec(
            select(PostRecord).where(
                PostRecord.month == month, PostRecord.status == PostStatus.WAITING
            )
        )
        if p.not_before is None or p.not_before <= now
    ]
    for post in due:
        moves.post(post, PostStatus.PENDING, "wait over")
    return len(due)


def retry_failed(
    session: Session, moves: Transitions, month: str, kinds: set[FailureKind] | None
) -> int:
    """A person's decision: failed posts (of these kinds) back to `pending`."""
    query = select(PostRecord).where(
        PostRecord.month == month, PostRecord.status == PostStatus.FAILED
    )
    failed = [p for p in session.exec(query) if kinds is None or p.failure_kind in kinds]
    for post in failed:
        post.batch_id = None
        # The person's yes buys each post its full number of paid attempts again (R38).
        post.extra_attempts = post.attempts
        moves.post(post, PostStatus.PENDING, f"retry asked for ({post.failure_kind})")
    return len(failed)
