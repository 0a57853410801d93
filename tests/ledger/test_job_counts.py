"""A running job's counts in the ledger (`Ledger.keep_job_counts`), on SQLite and PostgreSQL:
written on the submission whose job it is, with when they were seen, fenced by the run's claim
on the month, with no event (not a status change); and read back in plain SQL by what
`postledger status` shows, for as long as a batch of the job runs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from postledger.batches.posts import Post
from postledger.ledger import Ledger
from postledger.progress.jobs import jobs_report
from postledger.record.job_counts import JobCounts
from postledger.record.models import BatchStatus, SubmissionRecord
from tests.support.ledgers import asked

MONTH = "2026-10"
JOB = "batch_abc"
COUNTS = JobCounts(total=4, done=3, failed=1, processing=1)


@pytest.fixture
def running_job(any_ledger_url: str) -> Iterator[Ledger]:
    """A month of four batches, all running in one submission whose job id is saved."""
    ledger = Ledger(any_ledger_url)
    posts = [Post(f"p{i}", f"post number {i}", i + 1) for i in range(8)]
    ledger.sync_posts(MONTH, posts, model="m", analysis=asked())
    ledger.plan(MONTH, max_posts=2, max_chars=10_000)
    batch_ids = [b.batch_id for b in ledger.batches(MONTH)]
    for batch_id in batch_ids:
        ledger.mark_running(batch_id, "sim")
    ledger.record_submission(
        SubmissionRecord(
            submission_id=f"{MONTH}-s1",
            month=MONTH,
            idempotency_key="k",
            batch_ids=batch_ids,
            metadata_sent={},
        )
    )
    ledger.record_job_id(f"{MONTH}-s1", JOB)
    yield ledger
    ledger.close()


def test_the_counts_are_kept_on_the_submission_in_one_write_with_no_event(
    running_job: Ledger,
) -> None:
    ledger = running_job
    events = len(ledger.events(MONTH))
    seen = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    assert ledger.keep_job_counts(MONTH, JOB, COUNTS, seen_at=seen)
    kept = ledger.submission(f"{MONTH}-s1")
    assert JobCounts.of_json(kept.upstream_counts) == COUNTS
    assert kept.counts_seen_at == seen and kept.counts_seen_at.tzinfo is not None
    assert len(ledger.events(MONTH)) == events  # not a status change

    later = JobCounts(total=4, done=4, failed=1, processing=0)
    assert ledger.keep_job_counts(MONTH, JOB, later)  # the last counts replace the earlier
    kept = ledger.submission(f"{MONTH}-s1")
    assert JobCounts.of_json(kept.upstream_counts) == later
    assert kept.counts_seen_at is not None and kept.counts_seen_at > seen
    # A job the month has no submission of (its id never saved): nothing written.
    assert not ledger.keep_job_counts(MONTH, "batch_other", COUNTS)


def test_only_the_run_that_holds_the_month_writes_them(running_job: Ledger) -> None:
    ledger = running_job
    ledger.leases.claim(MONTH, "run-a")
    assert ledger.keep_job_counts(MONTH, JOB, COUNTS, holder="run-a")
    later = JobCounts(total=4, done=4, failed=0, processing=0)
    assert not ledger.keep_job_counts(MONTH, JOB, later, holder="run-b")  # lost the month
    assert JobCounts.of_json(ledger.submission(f"{MONTH}-s1").upstream_counts) == COUNTS


def test_status_shows_the_counts_while_a_batch_of_the_job_runs(running_job: Ledger) -> None:
    ledger = running_job
    made = ledger.submission(f"{MONTH}-s1").created_at
    with ledger.plain() as reader:
        (waiting,) = jobs_report(reader, MONTH, now=made + timedelta(minutes=5))
    assert waiting["upstream_counts"] is None
    assert (
        waiting["said"]
        == f"upstream job {JOB}: no counts from the upstream yet — job 5m old of 24h"
    )

    ledger.keep_job_counts(MONTH, JOB, COUNTS, seen_at=made + timedelta(hours=3, minutes=11))
    with ledger.plain() as reader:
        (job,) = jobs_report(reader, MONTH, now=made + timedelta(hours=3, minutes=12))
    assert job["job_id"] == JOB and job["upstream_counts"] == COUNTS.as_json()
    assert (job["age_seconds"], job["window_seconds"]) == (3 * 3600 + 12 * 60, 24 * 3600)
    assert job["said"] == (
        f"upstream job {JOB}: 3 of 4 requests done, 1 failed (the upstream's counts; results "
        "not yet saved) — job 3h12m old of 24h"
    )

    for batch in ledger.batches(MONTH, BatchStatus.RUNNING):  # the job ended: its lines read
        ledger.save_output(batch.batch_id, "[]", None)
    with ledger.plain() as reader:
        assert jobs_report(reader, MONTH) == []
