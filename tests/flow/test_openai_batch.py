"""The OpenAI Batch API over real HTTP against the simulator, what only it has: a create whose
answer was lost is found again by its metadata, and an orphaned upstream batch (made, its id
never saved) is adopted with no new charge. (The fault classes common to every kind, and the
batches that expired, were cancelled or failed before their request ran:
tests/flow/test_faults.py.)"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from postledger.ledger import Ledger
from postledger.record.crash import CRASH_EXIT_CODE
from postledger.record.models import BatchStatus, PostStatus
from tests.helpers import (
    MONTH,
    Sim,
    assert_attempts_are_charges,
    finish_month_here,
    on_worker_server,
    run_month,
    start_sim,
    statuses,
)
from tests.helpers import run_flow as run

KIND = "openai_batch"
pytestmark = pytest.mark.usefixtures("fast_retries")
FAST_TIMINGS = {"read_timeout": "1", "poll_interval": "0.05", "create_settle": "0.5"}


@pytest.fixture
def kind() -> str:
    return KIND


@pytest.mark.parametrize(
    "faulty",
    ["create:timeout_after_create#1;hold=3", "create:http_500_after_create#1"],
    indirect=True,
)
def test_a_create_whose_answer_was_lost_is_found_by_its_metadata_never_made_again(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert statuses(ledger) == {"completed": 25}
    assert faulty.creates() == 1  # looked for, not created again
    (charge,) = faulty.charges()
    (batch,) = ledger.batches(MONTH)
    assert charge["idempotency_key"] == batch.idempotency_key  # the one it made, adopted
    assert batch.upstream_task_id and batch.request_retries == 0
    assert any(
        "by its metadata" in e.why for e in ledger.events(MONTH) if e.entity_id == batch.batch_id
    )
    assert_attempts_are_charges(ledger, faulty)


# --- recovery: the orphan is adopted, not paid again -----------------------------------------


@pytest.fixture
def batch_sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "3")
    monkeypatch.setenv("POSTLEDGER_POLL_INTERVAL", "0.1")
    yield from start_sim(monkeypatch, KIND, latency=0.3)


@pytest.mark.processes  # runs postledger in other processes
def test_an_orphaned_batch_is_found_by_its_metadata_and_adopted_with_no_new_charge(
    batch_sim: Sim, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT="after_create", **on_worker_server(request))
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    ledger = Ledger(ledger_url)
    interrupted = ledger.batches(MONTH, BatchStatus.RUNNING)
    assert interrupted and not any(b.upstream_task_id for b in interrupted)
    charged_at_crash = batch_sim.charges()
    keys = Counter(c["idempotency_key"] for c in charged_at_crash)
    # The batch that crashed right after its create: made and paid upstream, id never saved.
    # (A neighbour still mid-create when the process died may never have arrived.)
    orphans = [b for b in interrupted if keys[b.idempotency_key] == 1]
    assert orphans
    ledger.close()

    finish_month_here(request, tmp_path)
    ledger = Ledger(ledger_url)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    charges = batch_sim.charges()
    assert Counter(c["idempotency_key"] for c in charges).most_common(1)[0][1] == 1
    assert batch_sim.charged_per_post() == Counter({p.post_id: 1 for p in ledger.posts(MONTH)})
    upstream_ids = {c["idempotency_key"]: c["task_id"] for c in charged_at_crash}
    listed = httpx.get(f"{batch_sim.url}/v1/batches", params={"limit": 100}).json()["data"]
    batch_of_task = {b["id"]: b for b in listed}
    for orphan in orphans:
        adopted = ledger.batch(orphan.batch_id)
        assert adopted.status is BatchStatus.COMPLETED and adopted.sends == 1
        upstream = batch_of_task[adopted.upstream_task_id or ""]
        assert upstream["metadata"]["postledger_key"] == orphan.idempotency_key
        assert upstream_ids[orphan.idempotency_key]  # the charge of the run that crashed
        assert any(
            e.entity_id == orphan.batch_id and e.why.startswith("adopted upstream task")
            for e in ledger.events(MONTH)
        )
    ledger.close()
