"""The upstream jobs of a month still running on a Batch API, as a person reads them: the
counts the upstream last reported (kept in the ledger by the run that follows the job), the
job's age and its window. Read from the ledger alone, in plain SQL: `postledger status` makes
no network call.

A job's counts are the upstream's tally, not ours: none of those requests' results is saved
until the job ends and its lines are read, so the words always say so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from postledger.record.job_counts import JobCounts
from postledger.record.kinds import BatchStatus, utcnow
from postledger.record.plain import Reader, stamped, when

# Both Batch APIs give a job 24 hours: OpenAI's completion_window "24h" (the only one it
# offers), and Anthropic's Message Batches, which expire after 24 hours.
JOB_WINDOW = timedelta(hours=24)
# Counts older than this are said to be (a run that died, or one that cannot reach the
# upstream, left them): they are the last ones seen, not the job as it is now.
STALE_COUNTS = timedelta(minutes=3)

NOT_SAVED = "the upstream's counts; results not yet saved"


@dataclass(frozen=True)
class RunningJob:
    """A submission with a batch still running: its upstream job, as the ledger knows it."""

    submission_id: str
    job_id: str | None  # None: the run that made it never saved its id
    created_at: datetime  # written just before the create: the job's age is counted from it
    counts: JobCounts | None  # None: no look has seen it running yet
    seen_at: datetime | None


def running_jobs(reader: Reader, month: str) -> list[RunningJob]:
    """The month's submissions that still have a running batch, oldest first."""
    found = reader.rows(
        "SELECT s.submission_id, s.upstream_job_id, s.created_at, s.upstream_counts, "
        "s.counts_seen_at FROM submissions s WHERE s.month = ? AND EXISTS (SELECT 1 FROM "
        "batches WHERE month = ? AND status = ? AND submission_id = s.submission_id) "
        "ORDER BY s.created_at",
        month,
        month,
        BatchStatus.RUNNING.name,
    )
    return [
        RunningJob(
            submission_id=submission_id,
            job_id=job_id,
            created_at=stamped(created_at),
            counts=JobCounts.of_json(json.loads(kept) if isinstance(kept, str) else kept),
            seen_at=when(seen_at),
        )
        for submission_id, job_id, created_at, kept, seen_at in found
    ]


def number(n: int) -> str:
    """`50000` -> "50 000": a count grouped in thousands, as a person reads it."""
    return f"{n:,}".replace(",", " ")


def age(span: timedelta) -> str:
    """`3 h 12 min` -> "3h12m"; under an hour "12m"; under a minute "40s"."""
    seconds = max(int(span.total_seconds()), 0)
    hours, rest = divmod(seconds, 3600)
    minutes = rest // 60
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m" if minutes else f"{seconds}s"


def counts_words(counts: JobCounts) -> str:
    """What the upstream's counts say, with the reminder that they are its own."""
    if not counts.counted_as_they_end and counts.done == 0:
        return (
            f"{number(counts.processing)} requests processing ({NOT_SAVED}; this upstream "
            "counts a request as done only once the whole job has ended)"
        )
    failed = f", {number(counts.failed)} failed" if counts.failed else ""
    return f"{number(counts.done)} of {number(counts.total)} requests done{failed} ({NOT_SAVED})"


# A job whose id is not in the ledger: its create is under way (a big job's can take seconds),
# or the run that made it stopped before saving its id (the next run looks for it).
UNSAVED_ID = "no id saved yet: being made, or a run stopped before saving it"


def job_words(job: RunningJob, now: datetime) -> str:
    """One line: "upstream job batch_abc: 3 210 of 50 000 requests done, 12 failed (the
    upstream's counts; results not yet saved) — job 3h12m old of 24h"."""
    name = (
        f"upstream job {job.job_id}"
        if job.job_id
        else f"the upstream job of {job.submission_id} ({UNSAVED_ID})"
    )
    said = counts_words(job.counts) if job.counts else "no counts from the upstream yet"
    if job.seen_at is not None and now - job.seen_at > STALE_COUNTS:
        said += f", last seen {age(now - job.seen_at)} ago"
    window = f"{int(JOB_WINDOW.total_seconds()) // 3600}h"
    return f"{name}: {said} — job {age(now - job.created_at)} old of {window}"


def job_short(job: RunningJob, now: datetime) -> str:
    """The same in a few words, for a progress bar's line: "upstream job: 3 210 of 50 000
    done, 12 failed (the upstream's counts, not saved results) · 3h12m of 24h"."""
    counts = job.counts
    if counts is None:
        said = "no counts yet"
    elif not counts.counted_as_they_end and counts.done == 0:
        said = f"{number(counts.processing)} processing"
    else:
        failed = f", {number(counts.failed)} failed" if counts.failed else ""
        said = f"{number(counts.done)} of {number(counts.total)} done{failed}"
    window = f"{int(JOB_WINDOW.total_seconds()) // 3600}h"
    return (
        f"upstream job: {said} (the upstream's counts, not saved results) · "
        f"{age(now - job.created_at)} of {window}"
    )


def jobs_report(reader: Reader, month: str, now: datetime | None = None) -> list[dict[str, Any]]:
    """The running jobs of `month` for a report (`status --json`, the progress bar, the
    artifact): each with its counts, age, window and the line that says them."""
    now = now or utcnow()
    return [
        {
            "submission_id": job.submission_id,
            "job_id": job.job_id,
            "created_at": job.created_at.isoformat(),
            "age_seconds": int((now - job.created_at).total_seconds()),
            "window_seconds": int(JOB_WINDOW.total_seconds()),
            "upstream_counts": job.counts.as_json() if job.counts else None,
            "counts_seen_at": job.seen_at.isoformat() if job.seen_at else None,
            "said": job_words(job, now),
            "short": job_short(job, now),
        }
        for job in running_jobs(reader, month)
    ]
