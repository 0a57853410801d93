"""The last counts a running upstream job reported, written on its submission: one UPDATE,
fenced by the run's claim on the month in the statement itself (R34). Not a status change, so
no event: the counts are only shown (`postledger.record.job_counts`)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import exists, update
from sqlmodel import Session

from postledger.record.job_counts import JobCounts
from postledger.record.models import MonthRunRecord, SubmissionRecord


def keep_counts(
    session: Session,
    month: str,
    job_id: str,
    counts: JobCounts,
    seen_at: datetime,
    holder: str | None,
) -> bool:
    """The counts on the month's submission whose job is `job_id`; with `holder`, only while
    that run holds the month. False when nothing was written (no such submission: its job id
    was never saved; or the month is held by another run now)."""
    submissions = SubmissionRecord.__table__.c  # type: ignore[attr-defined]
    where = [submissions.month == month, submissions.upstream_job_id == job_id]
    if holder is not None:
        claims = MonthRunRecord.__table__.c  # type: ignore[attr-defined]
        where.append(exists().where(claims.month == month, claims.holder == holder))
    statement = (
        update(SubmissionRecord.__table__)  # type: ignore[attr-defined]
        .where(*where)
        .values(upstream_counts=counts.as_json(), counts_seen_at=seen_at)
    )
    return bool(session.connection().execute(statement).rowcount)
