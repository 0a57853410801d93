"""Reading the ledger: what the flow, the CLI and progress reports look at. Nothing here
writes, so a ledger opened read-only (R30) offers all of it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime

from sqlalchemy import Engine, func
from sqlalchemy.orm import defer
from sqlmodel import Session, col, select

from postledger.errors import PostledgerError
from postledger.record import figures
from postledger.record.db import chunks
from postledger.record.in_list import any_of
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    EventRecord,
    JobBatch,
    PostRecord,
    PostStatus,
    SpendRecord,
    SubmissionRecord,
    utcnow,
)
from postledger.record.plain import Reader, through

# Requests read at a time: a few MB of posts.
_REQUESTS_READ = 250


def waits_for_job(batch: BatchRecord, submission: SubmissionRecord) -> bool:
    """Whether the batch was sent last in this submission and still runs without its job's
    id: the id, once known (or found), is its upstream task id."""
    return (
        batch.submission_id == submission.submission_id
        and batch.status is BatchStatus.RUNNING
        and batch.upstream_task_id is None
    )


def _waits_for_its_job(session: Session, submission: SubmissionRecord) -> bool:
    return any(waits_for_job(load_batch(session, b), submission) for b in submission.batch_ids)


class LedgerError(PostledgerError):
    """The ledger cannot do what was asked; the message says why and what to do."""


def load_batch(session: Session, batch_id: str) -> BatchRecord:
    batch = session.get(BatchRecord, batch_id)
    if batch is None:
        raise LedgerError(f"no batch {batch_id!r} in the ledger")
    return batch


def posts_in(session: Session, batch: BatchRecord, *statuses: PostStatus) -> list[PostRecord]:
    """The posts that are in `batch` now (a post may have moved on to a later batch). By key,
    among the ids the batch was planned with: its own rows, whatever the month's size. (Their
    status is checked here: asked of the database, it may choose the month's index by status,
    which reads every post of the month in that status.)"""
    query = select(PostRecord).where(
        PostRecord.month == batch.month,
        any_of(session.connection(), PostRecord.post_id, batch.post_ids),
        PostRecord.batch_id == batch.batch_id,
    )
    posts = sorted(session.exec(query), key=lambda post: post.position)
    return [post for post in posts if not statuses or post.status in statuses]


def load_batches(
    session: Session, batch_ids: Sequence[str], *, unread: Sequence[str] = ()
) -> list[BatchRecord]:
    """The batches, in the order asked, by one query; their `unread` columns (a request, an
    output: long JSON and text) are read only if used."""
    found: dict[str, BatchRecord] = {}
    options = [defer(getattr(BatchRecord, column)) for column in unread]
    for some in chunks(batch_ids):
        query = select(BatchRecord).where(any_of(session.connection(), BatchRecord.batch_id, some))
        query = query.options(*options)
        found.update((batch.batch_id, batch) for batch in session.exec(query))
    missing = [batch_id for batch_id in batch_ids if batch_id not in found]
    if missing:
        raise LedgerError(f"no batch {missing[0]!r} in the ledger")
    return [found[batch_id] for batch_id in batch_ids]


class LedgerReads:
    engine: Engine

    def plain(self) -> AbstractContextManager[Reader]:
        """A look at the ledger in plain SQL (`postledger.record.figures`), in one snapshot."""
        return through(self.engine)

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine) as session:
            yield session

    def runnable_batches(self, month: str, now: datetime | None = None) -> list[BatchRecord]:
        """Queued batches that may start now, in start order (R9)."""
        now = now or utcnow()
        return [
            b
            for b in self.batches(month, BatchStatus.QUEUED)
            if b.not_before is None or b.not_before <= now
        ]

    def next_to_start(self, month: str, limit: int, skip: set[str] | None = None) -> list[str]:
        """The ids of the first `limit` queued batches (other than `skip`) that may start now,
        in start order (R9): what the dispatch loop asks each time a slot frees, so it reads
        ids through the index, not whole batches."""
        skip = skip or set()
        query = (
            select(BatchRecord.batch_id)
            .where(
                BatchRecord.month == month,
                BatchRecord.status == BatchStatus.QUEUED,
                col(BatchRecord.not_before).is_(None) | (col(BatchRecord.not_before) <= utcnow()),
                col(BatchRecord.batch_id).not_in(skip),
            )
            .order_by(col(BatchRecord.seq))
            .limit(limit)
        )
        with self._read() as session:
            return list(session.exec(query))

    def next_wake(self, month: str, skip: set[str] | None = None) -> datetime | None:
        """When the earliest waiting post or held-back batch (other than `skip`) may go; None
        if nothing waits. Asked of the database (how many, how many with a time, the earliest
        time): a month's 40 000 queued batches are not read to find it."""
        now = utcnow()
        posts = select(
            func.count(), func.count(col(PostRecord.not_before)), func.min(PostRecord.not_before)
        ).where(PostRecord.month == month, PostRecord.status == PostStatus.WAITING)
        batches = select(
            func.count(), func.count(col(BatchRecord.not_before)), func.min(BatchRecord.not_before)
        ).where(BatchRecord.month == month, BatchRecord.status == BatchStatus.QUEUED)
        if skip:
            batches = batches.where(col(BatchRecord.batch_id).not_in(skip))
        times = []
        with self._read() as session:
            for query in (posts, batches):
                count, timed, earliest = session.exec(query).one()
                if count > timed:  # one of them may go now
                    times.append(now)
                elif earliest is not None:
                    times.append(earliest)
        return min(times) if times else None

    def batch_ids(self, month: str, *statuses: BatchStatus) -> list[str]:
        """The ids of the month's batches (in these statuses), in start order: what a caller
        that names them reads, not the batches with their requests and outputs."""
        with self._read() as session:
            query = select(BatchRecord.batch_id).where(BatchRecord.month == month)
            if statuses:
                query = query.where(col(BatchRecord.status).in_(statuses))
            return list(session.exec(query.order_by(col(BatchRecord.seq))))

    # --- reading ---------------------------------------------------------------------------

    def counts(self, month: str) -> dict[PostStatus, int]:
        with self.plain() as reader:
            return figures.post_counts(reader, month)

    def still_queued(self, batch_ids: set[str]) -> set[str]:
        """Those of the batches that are still queued: not yet started, nor held back."""
        if not batch_ids:
            return set()
        with self._read() as session:
            query = select(BatchRecord.batch_id).where(
                any_of(session.connection(), BatchRecord.batch_id, batch_ids),
                BatchRecord.status == BatchStatus.QUEUED,
            )
            return set(session.exec(query))

    def knows_month(self, month: str) -> bool:
        """Whether any post of the month was ever synced (a run of it has started)."""
        with self._read() as session:
            query = select(PostRecord.post_id).where(PostRecord.month == month)
            return session.exec(query.limit(1)).first() is not None

    def has_posts(self, month: str, status: PostStatus) -> bool:
        """Whether any post of the month is in `status`: cheaper than `counts`, which the
        dispatch loop would otherwise ask between every two batches."""
        with self._read() as session:
            query = select(PostRecord.post_id).where(
                PostRecord.month == month, PostRecord.status == status
            )
            return session.exec(query.limit(1)).first() is not None

    def count_in(self, month: str, status: PostStatus) -> int:
        """How many of the month's posts are in `status`: counted in the index, over those
        posts only (not the month's)."""
        with self._read() as session:
            query = select(func.count()).where(
                PostRecord.month == month, PostRecord.status == status
            )
            return int(session.exec(query).one())

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

    def batch_figures(self, month: str) -> figures.BatchFigures:
        """The month's batches in numbers, counted by the database (a month has thousands of
        batches, each with its request and output: `status` reads none of them)."""
        with self.plain() as reader:
            return figures.batch_figures(reader, month)

    def posts_of(self, batch_id: str) -> list[PostRecord]:
        """The posts that are in the batch now, in file order."""
        with self._read() as session:
            return self._posts_of(session, self._batch(session, batch_id))

    def batch(self, batch_id: str) -> BatchRecord:
        with self._read() as session:
            return self._batch(session, batch_id)

    def job_batches(self, batch_ids: Sequence[str]) -> list[JobBatch]:
        """A job's batches as a trip holds them while the job runs: their ids and what a
        settle reads of them, in the order asked (a settle reads a chunk's posts when it
        needs them; 20 000 batches' posts are 250 MB)."""
        found: dict[str, JobBatch] = {}
        for some in chunks(batch_ids):
            with self._read() as session:
                query = select(
                    BatchRecord.batch_id, BatchRecord.month, BatchRecord.request_retries
                ).where(any_of(session.connection(), BatchRecord.batch_id, some))
                found.update((row[0], JobBatch(*row)) for row in session.exec(query))
        missing = [batch_id for batch_id in batch_ids if batch_id not in found]
        if missing:
            raise LedgerError(f"no batch {missing[0]!r} in the ledger")
        return [found[batch_id] for batch_id in batch_ids]

    def requests_of(self, batch_ids: Sequence[str]) -> Iterator[tuple[str, list[tuple[str, str]]]]:
        """Each batch's request as first sent (R35): its posts' ids and texts, in the order
        asked, read a chunk of batches at a time (a job's file is written from them)."""
        for start in range(0, len(batch_ids), _REQUESTS_READ):
            some = batch_ids[start : start + _REQUESTS_READ]
            with self._read() as session:
                query = select(BatchRecord.batch_id, BatchRecord.request).where(
                    any_of(session.connection(), BatchRecord.batch_id, some)
                )
                found = dict(session.exec(query).all())
            for batch_id in some:
                request = found.get(batch_id)
                if request is None:
                    raise LedgerError(f"batch {batch_id!r} has no request: it was never sent")
                yield batch_id, [(post_id, text) for post_id, text in request]

    def submission(self, submission_id: str) -> SubmissionRecord:
        with self._read() as session:
            found = session.get(SubmissionRecord, submission_id)
            if found is None:
                raise LedgerError(f"no submission {submission_id!r} in the ledger")
            return found

    def orphaned_submissions(self, month: str) -> list[SubmissionRecord]:
        """The month's submissions with no job id whose batches still run without a task id:
        their job may have been made (and charged) by a run that died before saving its id."""
        with self._read() as session:
            candidates = session.exec(
                select(SubmissionRecord).where(
                    SubmissionRecord.month == month,
                    col(SubmissionRecord.upstream_job_id).is_(None),
                )
            ).all()
            return [s for s in candidates if _waits_for_its_job(session, s)]

    def spend(self, month: str) -> list[SpendRecord]:
        with self._read() as session:
            return list(
                session.exec(
                    select(SpendRecord)
                    .where(SpendRecord.month == month)
                    .order_by(col(SpendRecord.id))
                )
            )

    def spend_totals(self, month: str) -> dict[str, int]:
        """The month's spend, summed by the database: cheap to ask while a long month runs."""
        with self.plain() as reader:
            return figures.spend_totals(reader, month)

    def forecast_total(self, month: str) -> int | None:
        """What the month should cost in all, as its latest run forecast it (None: none)."""
        with self.plain() as reader:
            return figures.forecast_total(reader, month)

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

    _batch = staticmethod(load_batch)
    _posts_of = staticmethod(posts_in)
