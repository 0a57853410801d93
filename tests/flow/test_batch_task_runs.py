"""Each batch is one `process-batch` task run, tagged `ai-batch`, named by its batch id, whose
final state in Prefect says what happened to the batch (R8). Read back through the Prefect
client and checked against the ledger and the simulator's charge log."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from postledger.ledger import Ledger
from postledger.record.models import BatchStatus, PostStatus
from tests.support.prefect_api import ai_batch_slots_taken, task_runs_of
from tests.support.simulators import Sim

MONTH = "2026-06"


# The first output has one bad item (its post is retried); the second is not JSON at all (its
# batch fails and is split into halves).
@pytest.mark.parametrize("faulty", ["output:bad_field#1,output:not_json#2"], indirect=True)
def test_every_batch_is_one_task_run_named_by_its_id_whose_state_says_what_happened(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.monthly import monthly_posts

    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "5")
    path = tmp_path / f"{MONTH}.jsonl"
    path.write_text(
        "".join(f'{{"id": "t{i:02d}", "text": "Does sync work on day {i}?"}}\n' for i in range(20)),
        encoding="utf-8",
    )
    state = monthly_posts(month=MONTH, posts_path=str(path), return_state=True)
    assert state.is_completed(), state
    assert ledger.counts(MONTH)[PostStatus.COMPLETED] == 20

    batches = {b.batch_id: b for b in ledger.batches(MONTH)}
    # 4 planned, 2 halves of the unusable one, 1 for the retried post.
    assert len(batches) == 7
    assert len(faulty.charges()) == 7
    assert state.state_details.flow_run_id is not None  # a flow's state always names its run
    runs = task_runs_of(
        state.state_details.flow_run_id,
        lambda runs: (
            sum(
                run.name in batches and run.state is not None and run.state.is_final()
                for run in runs
            )
            == 7
        ),
    )
    # One task run per batch, named by its id, under the tag; no other tagged run.
    batch_runs = [run for run in runs if "ai-batch" in run.tags]
    assert sorted(run.name for run in batch_runs) == sorted(batches)
    assert all(run.tags == ["ai-batch"] for run in batch_runs)

    outcomes = {run.name: run.state for run in batch_runs}
    for batch_id, batch in batches.items():
        final = outcomes[batch_id]
        if batch.status is BatchStatus.COMPLETED:
            assert final.is_completed(), (batch_id, final)
            assert re.fullmatch(r"\d+ completed(, \d+ retried)?", final.message or ""), final
        else:
            assert batch.status is BatchStatus.FAILED, batch
            assert final.is_failed(), (batch_id, final)
            assert (final.message or "").startswith("batch_invalid: "), final
    messages = sorted(state.message or "" for state in outcomes.values())
    assert "4 completed, 1 retried" in messages
    assert sum(m.startswith("batch_invalid: ") for m in messages) == 1

    # Two at most at once, and every slot given back.
    assert faulty.stats()["max_in_flight"] <= 2
    assert ai_batch_slots_taken() == 0
