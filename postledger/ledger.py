"""The ledger: every post, batch and status change of every month, persisted.

Each write is one transaction that holds the month's lock (R5) and goes through
`postledger.states.Transitions`, so history and state can never disagree.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from postledger.analysis import OutputCheck
from postledger.db import MonthLocks, create_schema, make_engine
from postledger.models import (
    BatchRecord,
    BatchStatus,
    Charge,
    EntityKind,
    EventRecord,
    FailureKind,
    PostRecord,
    PostStatus,
    utcnow,
)
from postledger.planning import Sized, plan_batches
from postledger.policy import Decision
from postledger.posts import Post, fingerprint
from postledger.states import Transitions


class LedgerError(RuntimeError):
    """The ledger cannot do what was asked; the message says why and what to do."""


@dataclass(frozen=True)
class SyncReport:
    new: int
    unchanged: int
    changed: int


@dataclass(frozen=True)
class PlanReport:
    batches: list[BatchRecord]
    too_long: int


def batch_id_for(month: str, seq: int) -> str:
    return f"{month}-b{seq:04d}"


def month_of(batch_id: str) -> str:
    return batch_id.split("-b", 1)[0]


_shared: dict[str, Ledger] = {}
_shared_guard = threading.Lock()


def open_ledger(url: str) -> Ledger:
    """The process's one Ledger for `url`: engines are thread-safe and costly to make, and one
    set of month locks per process is what serializes its threads."""
    with _shared_guard:
        if url not in _shared:
            _shared[url] = Ledger(url)
        return _shared[url]


class Ledger:
    def __init__(self, url: str, *, read_only: bool = False) -> None:
        self.url = url
        self.engine: Engine = make_engine(url, read_only=read_only)
        if not read_only:
            create_schema(self.engine)
        self._locks = MonthLocks(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # --- sessions --------------------------------------------------------------------------

    @contextmanager
    def _write(self, month: str) -> Iterator[tuple[Session, Transitions]]:
        with self._locks.session(month) as session:
            yield session, Transitions(session, month)

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine) as session:
            yield session

    # --- input -----------------------------------------------------------------------------

    def sync_posts(
        self, month: str, posts: Sequence[Post], *, model: str, prompt: str
    ) -> SyncReport:
        """Make the ledger know every post of the file: new ones `pending`, unchanged ones as
        they were, changed ones (text, model or prompt, R25) back to `pending`."""
        new = unchanged = changed = 0
        with self._write(month) as (session, moves):
            known = {
                p.post_id: p
                for p in session.exec(select(PostRecord).where(PostRecord.month == month))
            }
            for position, post in enumerate(posts):
                print_ = fingerprint(post.text, model, prompt)
                record = known.get(post.id)
                if record is None:
                    session.add(
                        PostRecord(
                            month=month,
                            post_id=post.id,
                            position=position,
                            text=post.text,
                            fingerprint=print_,
                        )
                    )
                    moves.created(EntityKind.POST, post.id, PostStatus.PENDING, "read from input")
                    new += 1
                    continue
                record.position = position
                if record.fingerprint == print_:
                    unchanged += 1
                    session.add(record)
                    continue
                changed += 1
                record.text, record.fingerprint = post.text, print_
                record.result, record.batch_id = None, None
                if record.status is PostStatus.PENDING:
                    session.add(record)
                else:
                    moves.post(record, PostStatus.PENDING, "input changed (text, model or prompt)")
        return SyncReport(new=new, unchanged=unchanged, changed=changed)

    # --- planning --------------------------------------------------------------------------

    def replan_unsent(self, month: str) -> int:
        """Dissolve batches planned by an earlier run but never sent: they cost nothing, and
        their posts are planned again under the current limits. Returns the posts freed."""
        freed = 0
        with self._write(month) as (session, moves):
            for batch in session.exec(
                select(BatchRecord).where(
                    BatchRecord.month == month,
                    BatchRecord.status == BatchStatus.QUEUED,
                    BatchRecord.sends == 0,
                )
            ):
                for post in self._posts_of(session, batch, PostStatus.QUEUED):
                    moves.post(post, PostStatus.PENDING, f"batch {batch.batch_id} re-planned")
                    post.batch_id = None
                    freed += 1
                moves.batch(
                    batch, BatchStatus.CANCELLED, "never sent; its posts were planned again"
                )
        return freed

    def plan(self, month: str, *, max_posts: int, max_chars: int) -> PlanReport:
        """Put every `pending` post into a new batch (R7); posts too long to send end `failed`."""
        with self._write(month) as (session, moves):
            pending = list(
                session.exec(
                    select(PostRecord)
                    .where(PostRecord.month == month, PostRecord.status == PostStatus.PENDING)
                    .order_by(col(PostRecord.position))
                )
            )
            by_id = {p.post_id: p for p in pending}
            plan = plan_batches(
                [Sized(p.post_id, len(p.text)) for p in pending],
                max_posts=max_posts,
                max_chars=max_chars,
            )
            for sized in plan.too_long:
                moves.post(
                    by_id[sized.post_id],
                    PostStatus.FAILED,
                    f"the post has {sized.chars} characters, more than max_batch_chars="
                    f"{max_chars}: it was never sent. Shorten it, or raise "
                    "POSTLEDGER_MAX_BATCH_CHARS",
                    failure=FailureKind.TOO_LONG,
                )
            batches = self._new_batches(session, moves, month, plan.batches, by_id)
        return PlanReport(batches=batches, too_long=len(plan.too_long))

    def _new_batches(
        self,
        session: Session,
        moves: Transitions,
        month: str,
        groups: list[list[str]],
        by_id: dict[str, PostRecord],
        *,
        split_from: str | None = None,
    ) -> list[BatchRecord]:
        last_seq = session.exec(
            select(func.max(BatchRecord.seq)).where(BatchRecord.month == month)
        ).one()
        batches = []
        for offset, post_ids in enumerate(groups, start=1):
            seq = (last_seq or 0) + offset
            batch = BatchRecord(
                batch_id=batch_id_for(month, seq),
                month=month,
                seq=seq,
                post_ids=post_ids,
                idempotency_key=f"postledger-{uuid.uuid4()}",
                split_from=split_from,
            )
            session.add(batch)
            origin = f", half of {split_from}" if split_from else ""
            moves.created(
                EntityKind.BATCH,
                batch.batch_id,
                BatchStatus.QUEUED,
                f"planned with {len(post_ids)} posts{origin}",
            )
            for post_id in post_ids:
                by_id[post_id].batch_id = batch.batch_id
                moves.post(by_id[post_id], PostStatus.QUEUED, f"planned in {batch.batch_id}")
            batches.append(batch)
        return batches

    # --- one batch's life ------------------------------------------------------------------

    def mark_running(self, batch_id: str) -> tuple[BatchRecord, list[PostRecord]]:
        """Persist the intent to pay before paying (R3): the batch and its posts `running`,
        each post's business attempt counted. Only after this returns may the AI be called.

        A batch sent again with its same idempotency key is the same attempt: an upstream
        that honours keys charges a key once, so the attempt is not counted twice."""
        month = month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            moves.batch(batch, BatchStatus.RUNNING, "about to call the upstream")
            posts = self._posts_of(session, batch, PostStatus.QUEUED)
            if len(posts) != len(batch.post_ids):
                raise LedgerError(
                    f"batch {batch_id} lists {len(batch.post_ids)} posts but only "
                    f"{len(posts)} are queued in it: the ledger changed under this run"
                )
            first = batch.charge is Charge.NONE
            batch.sends += 1
            batch.not_before = None
            if first:
                batch.charge = Charge.POSSIBLE
            for post in posts:
                post.attempts += 1 if first else 0
                moves.post(
                    post,
                    PostStatus.RUNNING,
                    f"{batch_id} sent (attempt {post.attempts}"
                    + ("" if first else f", same key, send {batch.sends}")
                    + ")",
                )
        return batch, posts

    def record_task_id(self, batch_id: str, task_id: str) -> None:
        """Save the upstream task id the moment it is known: recovery polls it (R23)."""
        month = month_of(batch_id)
        with self._write(month) as (session, _):
            batch = self._batch(session, batch_id)
            batch.upstream_task_id = task_id
            batch.charge = Charge.CONFIRMED
            session.add(batch)

    def save_output(self, batch_id: str, raw: str, usage: dict[str, Any] | None) -> None:
        """Persist the raw output before checking it (R4): a crash while validating loses
        nothing, and nobody pays for it again."""
        month = month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            batch.raw_output, batch.usage = raw, usage
            moves.batch(batch, BatchStatus.RECEIVED, "output saved, not yet validated")
            for post in self._posts_of(session, batch, PostStatus.RUNNING):
                moves.post(post, PostStatus.RECEIVED, "output saved, not yet validated")

    def apply(self, batch_id: str, decision: Decision, check: OutputCheck | None = None) -> None:
        """Carry out a business decision (postledger.policy) in one transaction: successes
        saved first (R13), the others retried, split, made to wait or ended with a reason."""
        month = month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            posts = {
                p.post_id: p
                for p in self._posts_of(session, batch, PostStatus.RUNNING, PostStatus.RECEIVED)
            }
            for move in decision.moves:
                post = posts.pop(move.post_id)
                if move.to is PostStatus.COMPLETED:
                    assert check is not None, "a completed post needs the checked output"
                    post.result = check.valid[move.post_id].model_dump(mode="json", exclude={"id"})
                if move.refund:
                    post.attempts -= 1
                if move.requeue:
                    post.requeues += 1
                if move.to in (PostStatus.PENDING, PostStatus.WAITING):
                    post.batch_id = None
                moves.post(post, move.to, move.why, failure=move.kind)
                post.not_before = move.not_before
            if decision.halves:
                halves = [[posts.pop(pid) for pid in half] for half in decision.halves]
                by_id = {p.post_id: p for half in halves for p in half}
                self._new_batches(
                    session, moves, month, decision.halves, by_id, split_from=batch_id
                )
            if posts:
                raise LedgerError(
                    f"the decision for {batch_id} left posts without a move: {sorted(posts)}"
                )
            if decision.nothing_charged:
                batch.charge = Charge.NONE
            moves.batch(batch, decision.batch_to, decision.why, failure=decision.kind)
            batch.not_before = decision.batch_not_before

    def release_due(self, month: str, now: datetime | None = None) -> int:
        """Posts whose wait is over go back to `pending`, to be planned again (R11)."""
        now = now or utcnow()
        with self._write(month) as (session, moves):
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

    def retry_failed(self, month: str, kinds: set[FailureKind] | None = None) -> int:
        """A person's decision: failed posts (of these kinds) are planned again."""
        with self._write(month) as (session, moves):
            query = select(PostRecord).where(
                PostRecord.month == month, PostRecord.status == PostStatus.FAILED
            )
            failed = [p for p in session.exec(query) if kinds is None or p.failure_kind in kinds]
            for post in failed:
                post.batch_id = None
                moves.post(post, PostStatus.PENDING, f"retry asked for ({post.failure_kind})")
        return len(failed)

    def runnable_batches(self, month: str, now: datetime | None = None) -> list[BatchRecord]:
        """Queued batches that may start now, in start order (R9)."""
        now = now or utcnow()
        return [
            b
            for b in self.batches(month, BatchStatus.QUEUED)
            if b.not_before is None or b.not_before <= now
        ]

    def next_wake(self, month: str, skip: set[str] | None = None) -> datetime | None:
        """When the earliest waiting post or held-back batch (other than `skip`) may go; None
        if nothing waits."""
        now = utcnow()
        skip = skip or set()
        times = [p.not_before or now for p in self.posts(month, PostStatus.WAITING)]
        times += [
            b.not_before or now
            for b in self.batches(month, BatchStatus.QUEUED)
            if b.batch_id not in skip
        ]
        return min(times) if times else None

    def count_request_retry(self, batch_id: str) -> None:
        """One more request-layer retry for this batch (R16: not a business attempt)."""
        month = month_of(batch_id)
        with self._write(month) as (session, _):
            batch = self._batch(session, batch_id)
            batch.request_retries += 1
            session.add(batch)

    # --- reading ---------------------------------------------------------------------------

    def counts(self, month: str) -> dict[PostStatus, int]:
        with self._read() as session:
            rows = session.exec(
                select(PostRecord.status, func.count())
                .where(PostRecord.month == month)
                .group_by(PostRecord.status)
            ).all()
        counts = {status: 0 for status in PostStatus}
        counts.update({PostStatus(status): n for status, n in rows})
        return counts

    def posts(self, month: str, *statuses: PostStatus) -> list[PostRecord]:
        with self._read() as session:
            query = select(PostRecord).where(PostRecord.month == month)
            if statuses:
                query = query.where(col(PostRecord.status).in_(statuses))
            return list(session.exec(query.order_by(col(PostRecord.position))))

    def batches(self, month: str, *statuses: BatchStatus) -> list[BatchRecord]:
        with self._read() as session:
            query = select(BatchRecord).where(BatchRecord.month == month)
            if statuses:
                query = query.where(col(BatchRecord.status).in_(statuses))
            return list(session.exec(query.order_by(col(BatchRecord.seq))))

    def posts_of(self, batch_id: str) -> list[PostRecord]:
        """The posts that are in the batch now, in file order."""
        with self._read() as session:
            return self._posts_of(session, self._batch(session, batch_id))

    def batch(self, batch_id: str) -> BatchRecord:
        with self._read() as session:
            return self._batch(session, batch_id)

    def events(self, month: str) -> list[EventRecord]:
        with self._read() as session:
            return list(
                session.exec(
                    select(EventRecord)
                    .where(EventRecord.month == month)
                    .order_by(col(EventRecord.seq))
                )
            )

    # --- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _batch(session: Session, batch_id: str) -> BatchRecord:
        batch = session.get(BatchRecord, batch_id)
        if batch is None:
            raise LedgerError(f"no batch {batch_id!r} in the ledger")
        return batch

    @staticmethod
    def _posts_of(session: Session, batch: BatchRecord, *statuses: PostStatus) -> list[PostRecord]:
        """The posts that are in `batch` now (a post may have moved on to a later batch)."""
        query = select(PostRecord).where(
            PostRecord.month == batch.month, PostRecord.batch_id == batch.batch_id
        )
        if statuses:
            query = query.where(col(PostRecord.status).in_(statuses))
        return list(session.exec(query.order_by(col(PostRecord.position))))
