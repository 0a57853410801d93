"""A Batch API job's lines are settled a chunk at a time (`postledger.trip.settle.settle_outputs`):
every output of a chunk saved in one transaction, then each checked and decided in another.
A `postledger run` killed between the two, in the middle of its job's lines (the first chunk
settled, the second saved and not checked, the rest not yet saved), is finished by the next run
from what was saved, with no new charge. The evidence is the ledger and the simulator's charge
log, over real HTTP."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from postledger.ledger import Ledger
from postledger.record.crash import CRASH_EXIT_CODE, CrashPoint
from postledger.record.models import BatchStatus, PostStatus
from postledger.trip.following import SETTLE_CHUNK
from tests.support.commands import postledger
from tests.support.months import MONTH, finish_month_here, on_worker_server, posts_file
from tests.support.simulators import Sim, start_sim

# One post a batch, two chunks and a part of a third: 2.4 chunks of lines in one job.
POSTS = SETTLE_CHUNK * 2 + SETTLE_CHUNK // 2


@pytest.fixture
def job_sim(monkeypatch: pytest.MonkeyPatch, kind: str) -> Iterator[Sim]:
    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "1")
    monkeypatch.setenv("POSTLEDGER_POLL_INTERVAL", "0.1")
    yield from start_sim(monkeypatch, kind, latency=0.3)


@pytest.mark.on_postgres  # a crash across processes, finished by the next run
@pytest.mark.processes  # runs postledger in another process
@pytest.mark.parametrize("kind", ["openai_batch", "anthropic_batch"])
def test_a_bulk_settle_crashed_midway_is_finished_by_the_next_run_with_no_new_charge(
    job_sim: Sim, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    posts = posts_file(tmp_path / "posts.jsonl", POSTS, ids="p{:04d}")
    crashed = postledger(
        "run",
        "--month",
        MONTH,
        "--posts",
        str(posts),
        cwd=tmp_path,
        POSTLEDGER_CRASH_AT=CrashPoint.DURING_VALIDATION.value,
        POSTLEDGER_CRASH_SKIP="1",  # past the first chunk: killed inside the second
        # Environment variables: never postledger()'s own keyword arguments.
        **on_worker_server(request),  # type: ignore[arg-type]
    )
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    charged = job_sim.charges()
    assert job_sim.creates() == 1  # one job carried every batch, and was paid for
    assert job_sim.charged_per_post() == Counter({f"p{i:04d}": 1 for i in range(POSTS)})

    ledger = Ledger(ledger_url)
    batches = ledger.batches(MONTH)
    by_status = Counter(b.status for b in batches)
    # The first chunk settled; the second saved, none of it checked; the rest not yet saved.
    assert by_status == {
        BatchStatus.COMPLETED: SETTLE_CHUNK,
        BatchStatus.RECEIVED: SETTLE_CHUNK,
        BatchStatus.RUNNING: POSTS - 2 * SETTLE_CHUNK,
    }
    received = [b for b in batches if b.status is BatchStatus.RECEIVED]
    assert all(b.raw_output is not None for b in received)
    assert {
        p.status for p in ledger.posts(MONTH) if p.batch_id in {b.batch_id for b in received}
    } == {PostStatus.RECEIVED}
    running = [b for b in batches if b.status is BatchStatus.RUNNING]
    assert all(b.raw_output is None and b.upstream_task_id for b in running)  # its id kept
    ledger.close()

    finish_month_here(request, tmp_path)
    ledger = Ledger(ledger_url)
    posts_now = ledger.posts(MONTH)
    assert {p.status for p in posts_now} == {PostStatus.COMPLETED}
    assert {p.attempts for p in posts_now} == {1}
    # No new charge: the saved outputs were checked from the ledger, the rest read from the
    # same job; nothing was sent again.
    assert job_sim.charges() == charged
    assert job_sim.creates() == 1
    assert {b.status for b in ledger.batches(MONTH)} == {BatchStatus.COMPLETED}
    assert {b.sends for b in ledger.batches(MONTH)} == {1}
    ledger.close()
