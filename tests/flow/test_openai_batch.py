"""The OpenAI Batch API over real HTTP against the simulator, what only it has: a create whose
answer was lost is found again by its metadata, never made again. (An orphaned job, made and
its id never saved, adopted with no new charge: tests/flow/test_submissions.py. The fault
classes common to every kind, and the batches that expired, were cancelled or failed before
their request ran: tests/flow/test_faults.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from postledger.ledger import Ledger
from tests.support.months import MONTH, assert_attempts_are_charges, statuses
from tests.support.months import run_flow as run
from tests.support.simulators import Sim

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
    assert batch.submission_id is not None
    submission = ledger.submission(batch.submission_id)
    assert charge["idempotency_key"] == submission.idempotency_key  # the one it made, adopted
    assert submission.upstream_job_id == batch.upstream_task_id
    assert batch.upstream_task_id and batch.request_retries == 0
    assert any(
        "by its metadata" in e.why for e in ledger.events(MONTH) if e.entity_id == batch.batch_id
    )
    assert_attempts_are_charges(ledger, faulty)
