"""A running Batch API job's counts: each provider's `request_counts` in the ledger's one shape
(`postledger.upstreams.job_counts`), kept and read back as JSON, and said in words that always
call them the upstream's counts, with the job's age and window (`postledger.progress.jobs`);
the simulator's OpenAI counts rise while a batch runs; a plain progress line says them."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from cli.run_view import ProgressLines
from postledger.progress.jobs import RunningJob, age, job_short, job_words, number
from postledger.record.job_counts import JobCounts
from postledger.settings import UpstreamKind
from postledger.upstreams.job_counts import job_counts
from simulator.openai_batch_output import running_counts
from simulator.openai_state import SimBatch
from simulator.upstream import SimTask

MADE = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)


def test_openai_counts_rise_as_requests_end() -> None:
    raw = {"total": 50_000, "completed": 3_198, "failed": 12}
    assert job_counts(UpstreamKind.OPENAI_BATCH, raw) == JobCounts(
        total=50_000, done=3_210, failed=12, processing=46_790
    )
    validating = {"total": 0, "completed": 0, "failed": 0}
    assert job_counts(UpstreamKind.OPENAI_BATCH, validating) == JobCounts(0, 0, 0, 0)


def test_anthropic_counts_every_request_processing_until_the_whole_job_ends() -> None:
    running = {"processing": 100, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    assert job_counts(UpstreamKind.ANTHROPIC_BATCH, running) == JobCounts(
        total=100, done=0, failed=0, processing=100, counted_as_they_end=False
    )
    ended = {"processing": 0, "succeeded": 90, "errored": 5, "canceled": 3, "expired": 2}
    counts = job_counts(UpstreamKind.ANTHROPIC_BATCH, ended)
    assert counts is not None and (counts.total, counts.done, counts.failed) == (100, 100, 10)


@pytest.mark.parametrize(
    ("kind", "raw"),
    [
        (UpstreamKind.OPENAI_BATCH, None),
        (UpstreamKind.OPENAI_BATCH, {"completed": 3}),  # no total: not OpenAI's shape
        (UpstreamKind.ANTHROPIC_BATCH, {"total": 3}),  # not Anthropic's shape
        (UpstreamKind.TASK_API, {"total": 3, "completed": 1, "failed": 0}),  # no jobs there
    ],
)
def test_counts_in_no_known_shape_are_none(kind: UpstreamKind, raw: dict[str, int] | None) -> None:
    assert job_counts(kind, raw) is None


def test_the_counts_are_kept_as_json_and_anything_else_is_not_read() -> None:
    counts = JobCounts(total=4, done=3, failed=1, processing=1, counted_as_they_end=False)
    assert JobCounts.of_json(counts.as_json()) == counts
    assert JobCounts.of_json(None) is None
    assert JobCounts.of_json({"total": 4}) is None  # cut short
    assert JobCounts.of_json({**counts.as_json(), "done": "3"}) is None
    assert JobCounts.of_json({**counts.as_json(), "later": 1}) == counts  # a newer field


def test_numbers_and_ages_as_a_person_reads_them() -> None:
    assert [number(n) for n in (0, 999, 3_210, 50_000, 1_000_000)] == [
        "0",
        "999",
        "3 210",
        "50 000",
        "1 000 000",
    ]
    spans = [timedelta(seconds=40), timedelta(minutes=12), timedelta(hours=3, minutes=2)]
    assert [age(span) for span in spans] == ["40s", "12m", "3h02m"]


def job(counts: JobCounts | None, seen: timedelta | None = None, job_id: str | None = "b1") -> Any:
    return RunningJob("2026-10-s1", job_id, MADE, counts, MADE + seen if seen else None)


def test_the_words_say_whose_counts_they_are_the_age_and_the_window() -> None:
    now = MADE + timedelta(hours=3, minutes=12)
    openai = JobCounts(total=50_000, done=3_210, failed=12, processing=46_790)
    assert job_words(job(openai, seen=timedelta(hours=3, minutes=11)), now) == (
        "upstream job b1: 3 210 of 50 000 requests done, 12 failed (the upstream's counts; "
        "results not yet saved) — job 3h12m old of 24h"
    )
    assert job_short(job(openai), now) == (
        "upstream job: 3 210 of 50 000 done, 12 failed (the upstream's counts, not saved "
        "results) · 3h12m of 24h"
    )
    anthropic = JobCounts(total=100, done=0, failed=0, processing=100, counted_as_they_end=False)
    said = job_words(job(anthropic, seen=timedelta(hours=3, minutes=11)), now)
    assert said.startswith("upstream job b1: 100 requests processing (the upstream's counts;")
    assert "counts a request as done only once the whole job has ended" in said
    assert "processing" in job_short(job(anthropic), now)
    # Counts seen long ago (the run that kept them died): said to be the last seen.
    stale = job_words(job(openai, seen=timedelta(minutes=2)), now)
    assert ", last seen 3h10m ago — job 3h12m old of 24h" in stale
    # No look saw it running yet; a job whose id was never saved.
    assert job_words(job(None), now) == (
        "upstream job b1: no counts from the upstream yet — job 3h12m old of 24h"
    )
    assert job_words(job(None, job_id=None), now).startswith(
        "the upstream job of 2026-10-s1 (no id saved yet: being made, or a run stopped "
        "before saving it): "
    )


def test_the_simulators_openai_counts_rise_over_the_batch_latency() -> None:
    task = SimTask("t", None, "m", "p", [], created=100.0, done_at=110.0, output="", 
                   input_tokens=0, output_tokens=0)  # fmt: skip
    batch = SimBatch("batch_1", task, "file_1", "24h", {}, 0)
    batch.requests = [(f"r{i}", [f"p{i}"]) for i in range(10)]
    batch.failed_request = "r0"
    seen = [running_counts(batch, now) for now in (100.5, 101.0, 105.5, 109.99)]
    assert [c["completed"] + c["failed"] for c in seen] == [0, 0, 5, 9]  # validating first
    assert all(c["total"] == 10 for c in seen)
    assert seen[2] == {"total": 10, "completed": 4, "failed": 1}  # r0 failed, counted so


def test_a_plain_progress_line_says_the_jobs_counts() -> None:
    out = io.StringIO()
    lines = ProgressLines("2026-10", 100, Console(file=out, width=300))
    lines.EVERY = 0.0
    said = "upstream job b1: 3 of 4 requests done (the upstream's counts; results not yet saved)"
    report = {
        "completed": 0,
        "failed": 0,
        "counts": {"running": 4},
        "upstream_jobs": [{"said": said}],
    }
    lines.maybe_print(report)
    assert out.getvalue().splitlines()[1] == f"  {said}"
