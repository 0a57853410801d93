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
from typing import Any

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from postledger.analysis import OutputCheck
from postledger.db import MonthLocks, create_schema, make_engine
from postledger.models import (
    BatchRecord,
    BatchStatus,
    EntityKind,
    EventRecord,
    FailureKind,
    PostRecord,
    PostStatus,
)
from postledger.planning import Sized, plan_batches
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
    replanned: int  # posts taken back from batches that were planned but never sent


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

    def plan(self, month: str, *, max_posts: int, max_chars: int) -> PlanReport:
        """Put every `pending` post into a new batch (R7); posts too long to send end `failed`.

        Batches planned earlier but never sent are dissolved first: they cost nothing, and
        planning again follows the current limits.
        """
        with self._write(month) as (session, moves):
            replanned = 0
            for batch in session.exec(
                select(BatchRecord).where(
                    BatchRecord.month == month, BatchRecord.status == BatchStatus.QUEUED
                )
            ):
                for post in self._posts_of(session, batch, PostStatus.QUEUED):
                    moves.post(post, PostStatus.PENDING, f"batch {batch.batch_id} re-planned")
                    post.batch_id = None
                    replanned += 1
                moves.batch(
                    batch,
                    BatchStatus.CANCELLED,
                    "never sent; its posts were planned again",
                )
            session.flush()

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
            last_seq = session.exec(
                select(func.max(BatchRecord.seq)).where(BatchRecord.month == month)
            ).one()
            batches = []
            for offset, post_ids in enumerate(plan.batches, start=1):
                seq = (last_seq or 0) + offset
                batch = BatchRecord(
                    batch_id=f"{month}-b{seq:04d}",
                    month=month,
                    seq=seq,
                    post_ids=post_ids,
                    idempotency_key=f"postledger-{uuid.uuid4()}",
                )
                session.add(batch)
                moves.created(
                    EntityKind.BATCH,
                    batch.batch_id,
                    BatchStatus.QUEUED,
                    f"planned with {len(post_ids)} posts",
                )
                for post_id in post_ids:
                    by_id[post_id].batch_id = batch.batch_id
                    moves.post(by_id[post_id], PostStatus.QUEUED, f"planned in {batch.batch_id}")
                batches.append(batch)
        return PlanReport(batches=batches, too_long=len(plan.too_long), replanned=replanned)

    # --- one batch's life ------------------------------------------------------------------

    def mark_running(self, batch_id: str) -> tuple[BatchRecord, list[PostRecord]]:
        """Persist the intent to pay before paying (R3): the batch and its posts `running`,
        each post's business attempt counted. Only after this returns may the AI be called."""
        month = self._month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            moves.batch(batch, BatchStatus.RUNNING, "about to call the upstream")
            posts = self._posts_of(session, batch, PostStatus.QUEUED)
            if len(posts) != len(batch.post_ids):
                raise LedgerError(
                    f"batch {batch_id} lists {len(batch.post_ids)} posts but only "
                    f"{len(posts)} are queued in it: the ledger changed under this run"
                )
            for post in posts:
                post.attempts += 1
                moves.post(post, PostStatus.RUNNING, f"{batch_id} sent, attempt {post.attempts}")
        return batch, posts

    def record_task_id(self, batch_id: str, task_id: str) -> None:
        """Save the upstream task id the moment it is known: recovery polls it (R23)."""
        month = self._month_of(batch_id)
        with self._write(month) as (session, _):
            batch = self._batch(session, batch_id)
            batch.upstream_task_id = task_id
            session.add(batch)

    def save_output(self, batch_id: str, raw: str, usage: dict[str, Any] | None) -> None:
        """Persist the raw output before checking it (R4): a crash while validating loses
        nothing, and nobody pays for it again."""
        month = self._month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            batch.raw_output, batch.usage = raw, usage
            moves.batch(batch, BatchStatus.RECEIVED, "output saved, not yet validated")
            for post in self._posts_of(session, batch, PostStatus.RUNNING):
                moves.post(post, PostStatus.RECEIVED, "output saved, not yet validated")

    def finish(self, batch_id: str, check: OutputCheck) -> None:
        """Save what validated (R13: successes first) and end the rest with their reason."""
        month = self._month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            for post in self._posts_of(session, batch, PostStatus.RECEIVED):
                analysis = check.valid.get(post.post_id)
                if analysis is not None:
                    post.result = analysis.model_dump(mode="json", exclude={"id"})
                    moves.post(post, PostStatus.COMPLETED, "validated and saved")
                else:
                    reason = check.unusable or check.invalid.get(post.post_id, "no result")
                    kind = FailureKind.BATCH_INVALID if check.unusable else FailureKind.INVALID_ITEM
                    moves.post(post, PostStatus.FAILED, reason, failure=kind)
            if check.unusable:
                moves.batch(
                    batch, BatchStatus.FAILED, check.unusable, failure=FailureKind.BATCH_INVALID
                )
            else:
                moves.batch(
                    batch,
                    BatchStatus.COMPLETED,
                    f"{len(check.valid)} completed, {len(check.invalid)} invalid",
                )

    def count_request_retry(self, batch_id: str) -> None:
        """One more request-layer retry for this batch (R16: not a business attempt)."""
        month = self._month_of(batch_id)
        with self._write(month) as (session, _):
            batch = self._batch(session, batch_id)
            batch.request_retries += 1
            session.add(batch)

    def fail(self, batch_id: str, kind: FailureKind, reason: str) -> None:
        """End a batch that produced no usable output, and its unfinished posts with it."""
        month = self._month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            for post in self._posts_of(session, batch, PostStatus.RUNNING, PostStatus.RECEIVED):
                moves.post(post, PostStatus.FAILED, reason, failure=kind)
            moves.batch(batch, BatchStatus.FAILED, reason, failure=kind)

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

    def months(self) -> list[str]:
        with self._read() as session:
            return list(session.exec(select(PostRecord.month).distinct().order_by("month")))

    # --- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _month_of(batch_id: str) -> str:
        return batch_id.split("-b", 1)[0]

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
