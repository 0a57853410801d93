"""Progress while a Batch API job runs, over real HTTP against the simulator: the run keeps the
counts the upstream reports in the ledger (for `postledger status`, no network) and refreshes
the month's progress artifact on a timer while the job is in flight, a new version each time
the counts moved: read back from the Prefect API, its versions before the job ended say the
upstream's counts rising (OpenAI), or every request processing (Anthropic, which counts none
as done until the whole job ends)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from postledger.ledger import Ledger
from postledger.progress.jobs import jobs_report
from postledger.record.job_counts import JobCounts
from tests.support.months import posts_file, statuses
from tests.support.simulators import Sim
from tests.support.waiting import in_background

pytestmark = pytest.mark.usefixtures("fast_retries")
# Two posts a batch: 40 posts are one job of 20 requests. The job's counts are looked at, and
# the progress shown, every second.
FAST_TIMINGS = {"poll_interval": "0.05", "progress_every": "1", "max_batch_posts": "2"}
# A job of six seconds: its counts rise over the five and a half after its validation.
SIMULATOR = {"latency": 6.0}
POSTS, REQUESTS = 40, 20
# Months of their own: the worker's Prefect server is shared by the session's tests, and a
# version another test left under the artifact's key would be read with these.
OPENAI_MONTH, ANTHROPIC_MONTH = "2027-05", "2027-06"
DONE = re.compile(r"[Uu]pstream job (\S+): (\d+) of 20 requests done")


def progress_versions(month: str) -> list[Any]:
    """Every version of the month's progress artifact, oldest first."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    from flows.artifacts import artifact_key

    key = ArtifactFilterKey(any_=[artifact_key(month, "progress")])
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=key), sort=ArtifactSort.CREATED_DESC
        )
    return found[::-1]


def run_watching(tmp_path: Path, ledger: Ledger, month: str) -> list[str]:
    """The month run while `postledger status`'s reading of the ledger is taken every 0.2 s:
    what it said of the running job each time."""
    from flows.monthly import monthly_posts

    posts = posts_file(tmp_path / f"{month}.jsonl", POSTS)
    thread, outcome = in_background(lambda: monthly_posts(month=month, posts_path=str(posts)))
    said: list[str] = []
    while thread.is_alive():
        with ledger.plain() as reader:
            said += [job["said"] for job in jobs_report(reader, month) if job["upstream_counts"]]
        thread.join(0.2)
    assert "error" not in outcome, outcome.get("error")
    return said


@pytest.fixture
def kind() -> str:
    return "openai_batch"


@pytest.mark.parametrize("faulty", [None], indirect=True)
def test_openai_counts_rise_in_the_artifact_and_the_ledger_while_the_job_runs(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    said = run_watching(tmp_path, ledger, OPENAI_MONTH)
    assert statuses(ledger, OPENAI_MONTH) == {"completed": POSTS}
    (batch, *_) = ledger.batches(OPENAI_MONTH)
    assert batch.submission_id is not None
    submission = ledger.submission(batch.submission_id)
    # The ledger holds the last counts a look saw while the job ran, and when.
    kept = JobCounts.of_json(submission.upstream_counts)
    assert kept is not None and kept.total == REQUESTS and 0 < kept.done < REQUESTS
    assert submission.counts_seen_at is not None and submission.counts_seen_at.tzinfo
    # `postledger status` read them from the ledger, rising, while the job ran.
    shown = [int(m.group(2)) for m in map(DONE.search, said) if m]
    assert len(set(shown)) >= 3 and shown == sorted(shown), said
    assert all("(the upstream's counts; results not yet saved)" in s for s in said)

    # The progress artifact: a version each time the counts moved, before the job ended.
    versions = [v.description or "" for v in progress_versions(OPENAI_MONTH)]
    during = [m for m in map(DONE.search, versions) if m]
    assert {m.group(1) for m in during} == {submission.upstream_job_id}
    done = [int(m.group(2)) for m in during]
    assert len(done) >= 3 and done == sorted(done) and done[-1] > done[0], versions
    assert all(n < REQUESTS for n in done)  # all of them while the job ran
    assert "old of 24h" in during[-1].string
    assert not DONE.search(versions[-1])  # the run's last word: the job ended, nothing running


@pytest.mark.parametrize("kind", ["anthropic_batch"])
@pytest.mark.parametrize("faulty", [None], indirect=True)
def test_anthropic_counts_say_every_request_processing_until_the_job_ends(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path, kind: str
) -> None:
    said = run_watching(tmp_path, ledger, ANTHROPIC_MONTH)
    assert statuses(ledger, ANTHROPIC_MONTH) == {"completed": POSTS}
    (batch, *_) = ledger.batches(ANTHROPIC_MONTH)
    assert batch.submission_id is not None
    kept = JobCounts.of_json(ledger.submission(batch.submission_id).upstream_counts)
    assert kept == JobCounts(
        total=REQUESTS, done=0, failed=0, processing=REQUESTS, counted_as_they_end=False
    )
    assert said and all("20 requests processing (the upstream's counts;" in s for s in said)
    versions = [v.description or "" for v in progress_versions(ANTHROPIC_MONTH)]
    assert any("20 requests processing" in v and "old of 24h" in v for v in versions)
