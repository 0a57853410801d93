"""A batch's trip and a submission's, straight from the core (`postledger.trip`), over the
real adapters and the simulator over loopback HTTP, with no Prefect in between
(`tests/support/trip_port.py`): what the flow-level tests cannot place exactly.

- A confirmed resubmission of a submission whose job's id was never kept is sent again in the
  same submission, under the same key, after a look for its job: the job is found and read,
  never made twice.
- What a failed task used, which the ledger could not book, is kept in the spill file.
- A look that gives no answer leaves the batches uncertain: nothing is sent.
- A gateway's own retries of a create are possible charges where the upstream ignores keys,
  and nothing where it honours the key they carried (the same task answered them).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from postledger.batches.posts import Post
from postledger.guards.spill import Spill, SpillFailed, SpillKind
from postledger.ledger import Ledger, open_ledger
from postledger.record.models import BatchStatus, SpendState
from postledger.recovery.interrupted import import_spill
from postledger.settings import Settings
from postledger.trip import (
    REAL_CLOCK,
    SubmissionEnded,
    new_submission_id,
    run_batch,
    run_submission,
)
from postledger.upstreams import facts_of
from tests.support.ledger_faults import failing_writes
from tests.support.months import MONTH
from tests.support.simulators import Sim, start_sim
from tests.support.trip_port import direct_trip


@pytest.fixture
def batch_api(monkeypatch: pytest.MonkeyPatch) -> Any:
    yield from start_sim(monkeypatch, "openai_batch", latency=0.05)


def planned(ledger: Ledger, n: int) -> list[str]:
    posts = [Post(f"p{i:02d}", f"The export page times out, case {i}.", i + 1) for i in range(n)]
    settings = Settings()
    ledger.sync_posts(MONTH, posts, model=settings.model, analysis=settings.analysis_in_use())
    ledger.plan(MONTH, max_posts=5, max_chars=10_000)
    return [b.batch_id for b in ledger.batches(MONTH, BatchStatus.QUEUED)]


def submit(ledger: Ledger, submission_id: str, batch_ids: list[str], **how: Any) -> SubmissionEnded:
    settings = Settings(poll_interval=0.05, request_backoff=0.05)
    trip = direct_trip(ledger, settings, REAL_CLOCK)
    return asyncio.run(run_submission(trip, submission_id, batch_ids, **how))


def sent_with_its_id_kept_nowhere(ledger_url: str, n: int) -> tuple[Ledger, str, list[str]]:
    """A submission of `n` posts' batches whose job is made, and whose id can be kept nowhere:
    the ledger and the spill both fail as it comes back."""
    ledger = open_ledger(ledger_url)  # the process's: the one whose writes are made to fail
    batch_ids = planned(ledger, n)
    submission_id = new_submission_id(MONTH)
    month_spill = Settings().spill_file(MONTH)
    month_spill.mkdir(parents=True)
    with (
        failing_writes(ledger_url, "UPDATE submissions SET upstream_job_id") as failed,
        pytest.raises(SpillFailed),
    ):
        raise_for(submit(ledger, submission_id, batch_ids))
    assert failed
    month_spill.rmdir()
    return ledger, submission_id, batch_ids


def test_a_resubmission_looks_for_the_job_first_under_the_same_key(
    batch_api: Sim, ledger_url: str
) -> None:
    ledger, submission_id, batch_ids = sent_with_its_id_kept_nowhere(ledger_url, 10)
    assert len(batch_api.charges()) == 1
    assert {ledger.batch(b).upstream_task_id for b in batch_ids} == {None}

    # A person said send them again: the same submission looks for its job, finds and reads it.
    ended = submit(ledger, submission_id, batch_ids, resend=True)
    statuses = [getattr(o, "status", None) for o in ended.outcomes]
    assert statuses == [BatchStatus.COMPLETED] * len(batch_ids)
    assert len(batch_api.charges()) == 1  # never made twice
    adopted = [e.why for e in ledger.events(MONTH) if "before sending again" in e.why]
    assert len(adopted) == len(batch_ids)


def test_a_resubmission_whose_look_gives_no_answer_sends_nothing(
    batch_api: Sim, ledger_url: str
) -> None:
    ledger, submission_id, batch_ids = sent_with_its_id_kept_nowhere(ledger_url, 5)

    batch_api.set_faults([{"on": "list", "fault": "html", "p": 1.0}])
    ended = submit(ledger, submission_id, batch_ids, resend=True)
    assert [getattr(o, "status", None) for o in ended.outcomes] == [BatchStatus.RUNNING]
    assert len(batch_api.charges()) == 1
    assert ledger.batch(batch_ids[0]).sends == 1  # not sent again


def raise_for(ended: SubmissionEnded) -> None:
    """A submission whose facts could be kept nowhere says so in its outcome (a spill that
    failed): raise it, as the run stops loudly with it."""
    for outcome in ended.outcomes:
        error = getattr(outcome, "error", "")
        if "neither could the spill file" in error:
            raise SpillFailed(error)
    raise AssertionError(f"the job's id was kept somewhere after all: {ended.outcomes}")


@pytest.fixture(params=[True, False], ids=["keys-honoured", "keys-ignored"])
def task_api(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    yield from start_sim(monkeypatch, "task_api", latency=0.05, honour_keys=request.param)


def test_a_gateways_own_retries_are_booked_only_where_they_could_be_charged(
    task_api: Sim, ledger_url: str
) -> None:
    ledger = open_ledger(ledger_url)
    (batch_id,) = planned(ledger, 3)
    task_api.set_faults([{"on": "create", "fault": "gateway_retries", "retries": 2, "p": 1.0}])
    settings = Settings(poll_interval=0.05, request_backoff=0.05)

    outcome = asyncio.run(run_batch(direct_trip(ledger, settings, REAL_CLOCK), batch_id))

    assert getattr(outcome, "status", None) is BatchStatus.COMPLETED
    charges = len(task_api.charges())
    states = sorted(row.state for row in ledger.spend(MONTH))
    if facts_of(settings).honours_keys:  # the retries carried the key: answered with the one task
        assert charges == 1
        assert states == [SpendState.CONFIRMED]
        assert ledger.batch(batch_id).gateway_retries == 0
    else:  # each retry made the task again, charged: each a possible charge on the books
        assert charges == 3
        assert states == [SpendState.CONFIRMED, SpendState.POSSIBLE, SpendState.POSSIBLE]
        assert ledger.batch(batch_id).gateway_retries == 2


@pytest.fixture
def plain_task_api(monkeypatch: pytest.MonkeyPatch) -> Any:
    yield from start_sim(monkeypatch, "task_api", latency=0.05)


def test_what_a_failed_task_used_is_spilled_when_the_ledger_cannot_book_it(
    plain_task_api: Sim, ledger_url: str
) -> None:
    """A task that ended failed still reports what it used, and is billed for it; a ledger
    that fails as that is booked must not lose it: the upstream may forget the task before
    the next look. It goes to the spill file, and the next run books it from there."""
    ledger = open_ledger(ledger_url)
    (batch_id,) = planned(ledger, 3)
    plain_task_api.set_faults([{"on": "task", "fault": "task_failed", "p": 1.0}])
    settings = Settings(poll_interval=0.05, request_backoff=0.05)

    with failing_writes(ledger_url, "UPDATE spend") as failed:
        outcome = asyncio.run(run_batch(direct_trip(ledger, settings, REAL_CLOCK), batch_id))
    assert failed, "the booking of the failed task's usage was never tried"
    assert ledger.batch(batch_id).status is BatchStatus.RUNNING, outcome
    assert [row.state for row in ledger.spend(MONTH)] == [SpendState.POSSIBLE]

    spill = Spill(settings.spill_file(MONTH))
    assert [r["kind"] for r in spill.records()] == [SpillKind.USAGE]
    taken, kept_aside = import_spill(ledger, spill, settings.price_book())
    assert (taken, kept_aside) == (1, None)

    (charge,) = plain_task_api.charges()
    (row,) = ledger.spend(MONTH)
    assert row.state is SpendState.CONFIRMED
    assert (row.input_tokens, row.output_tokens) == (
        charge["input_tokens"],
        charge["output_tokens"],
    )
