"""The paid path's holes, one scenario each, through the monthly flow over real HTTP against the
fault-injecting simulator, with the ledger failing a chosen write as a database would
(`tests/support/ledger_faults.py`). The evidence: the simulator's charge log, the ledger, the
spill.

- The id of a paid call is the first thing kept after it, in one write with a gateway's
  retries of the same call: a ledger failure there loses neither.
- A submission whose ledger (or spill) fails on the way stops new work, as a batch's does.
- A task id that reached only the spill, then a refused poll: the batch is uncertain, never
  taken as unpaid.
- A gateway's own retries are booked on a failed create too, and on every batch of a job.
- A look for orphans that gives no answer leaves their batches waiting, yes or no.
- A failed answer's reported usage is booked as it is.
- Under a budget, submissions start in order: none overtakes a batch held back.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from postledger.defaults import DEFAULT_PRICES
from postledger.guards.estimates import estimate
from postledger.guards.spend import cost_of
from postledger.guards.spill import Spill, SpillKind
from postledger.guards.usage import Usage
from postledger.ledger import Ledger
from postledger.record.models import (
    Answer,
    BatchStatus,
    Charge,
    FailureKind,
    Question,
    SpendState,
)
from postledger.settings import Settings
from tests.support.ledger_faults import failing_writes
from tests.support.months import MONTH, assert_attempts_are_charges, statuses, write_jsonl
from tests.support.months import run_flow as run
from tests.support.simulators import UPSTREAM_KINDS, Sim
from tests.support.simulators import fault_cases as cases

pytestmark = pytest.mark.usefixtures("fast_retries")

# A run that would pause for a person (it should never have to here) ends soon instead.
FAST_TIMINGS = {
    "poll_wait": "0.5",
    "poll_interval": "0.05",
    "read_timeout": "2",
    "approval_timeout": "2",
    "approval_poll": "0.2",
}
TASK_API, CHAT, BATCH, _MESSAGES, MESSAGE_BATCHES = UPSTREAM_KINDS
PRICE = DEFAULT_PRICES["sim-analyst-1"]


def spilled(kind: SpillKind) -> list[dict[str, Any]]:
    """The month's spill records of this kind, as the next run will import them."""
    return [r for r in Spill(Settings().spill_file(MONTH)).records() if r["kind"] == kind]


@pytest.mark.on_postgres  # one transaction
@pytest.mark.parametrize(
    ("kind", "faulty"),
    cases((BATCH, MESSAGE_BATCHES), "create:gateway_retries#1;retries=2"),
    indirect=["faulty"],
)
def test_the_jobs_id_and_the_gateways_retries_are_kept_together(
    prefect_harness: None, faulty: Sim, ledger: Ledger, ledger_url: str, tmp_path: Path
) -> None:
    """The job's id and what the gateway did with the create that made it are one write: a
    ledger failure on the retries sends both to the spill (a crash between two writes can no
    longer keep one and lose the other; before, the failure lost the id)."""
    from flows.dispatch import RunStopped

    with (
        failing_writes(ledger_url, "UPDATE batches SET gateway_retries") as failed,
        pytest.raises(RunStopped, match="a ledger write failed"),
    ):
        run(tmp_path, 50)  # two ledger batches, one job
    assert failed, "the gateway's retries were never booked: the test would prove nothing"
    batches = ledger.batches(MONTH)
    kept = spilled(SpillKind.TASK_ID)  # what the ledger could not take, together
    assert sorted(r["batch_id"] for r in kept) == sorted(b.batch_id for b in batches)
    (job_id,) = {r["task_id"] for r in kept}
    assert job_id is not None
    assert {r["retries"] for r in kept} == {2}

    run(tmp_path, 50, poll=True)  # the next run imports the spill and reads the job
    assert statuses(ledger) == {"completed": 50}
    # Two extra jobs the gateway made on its own, each paid for every post; nothing else.
    assert set(faulty.charged_per_post().values()) == {3}
    rows = Counter(
        row.batch_id for row in ledger.spend(MONTH) if row.state is not SpendState.REFUNDED
    )
    assert rows == {b.batch_id: 3 for b in batches}  # each on the books: a send, two retries


@pytest.mark.on_postgres  # the ledger failing
@pytest.mark.parametrize(
    ("kind", "faulty"), cases((BATCH, MESSAGE_BATCHES), "poll:http_502#1"), indirect=["faulty"]
)
def test_a_ledger_failure_in_a_submission_stops_new_work(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counting a request retry of the job's wait fails: the retry is not made, what the
    count was is spilled, and the run starts nothing more (it went on before)."""
    from flows.dispatch import RunStopped

    monkeypatch.setenv("POSTLEDGER_MAX_SUBMISSION_BATCHES", "1")  # a job per batch
    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")
    with (
        failing_writes(ledger_url, "UPDATE batches SET request_retries") as failed,
        pytest.raises(RunStopped, match="a ledger write failed"),
    ):
        run(tmp_path, 50)
    assert failed
    assert len(faulty.charges()) == 1  # no second job was started after the failure
    assert len(spilled(SpillKind.REQUEST_RETRY)) == 1
    first, second = ledger.batches(MONTH)
    assert first.status is BatchStatus.RUNNING and first.upstream_task_id is not None
    assert second.status is BatchStatus.QUEUED


@pytest.mark.on_postgres  # the spill imported
@pytest.mark.parametrize(("kind", "faulty"), cases((TASK_API,), "poll:auth#1"), indirect=["faulty"])
def test_a_task_id_only_in_the_spill_then_a_refused_poll_is_never_paid_again(
    prefect_harness: None, faulty: Sim, ledger: Ledger, ledger_url: str, tmp_path: Path
) -> None:
    from flows.dispatch import RunStopped

    with (
        failing_writes(ledger_url, "UPDATE batches SET upstream_task_id"),
        pytest.raises(RunStopped),
    ):
        run(tmp_path, 25)
    (batch,) = ledger.batches(MONTH)
    assert (batch.status, batch.upstream_task_id) == (BatchStatus.RUNNING, None)
    assert batch.charge is not Charge.NONE  # it was paid for: never given back
    assert [r["task_id"] for r in spilled(SpillKind.TASK_ID)] == [faulty.charges()[0]["task_id"]]

    run(tmp_path, 25, poll=True, resubmit=True)  # yes to both: the poll is what applies
    assert statuses(ledger) == {"completed": 25}
    assert len(faulty.charges()) == 1  # read from the task it paid for, never paid again
    assert_attempts_are_charges(ledger, faulty)


@pytest.mark.parametrize(
    ("kind", "faulty"),
    cases((CHAT,), "create:gateway_retries_then_500#1;retries=2"),
    indirect=["faulty"],
)
def test_a_gateways_retries_on_a_failed_create_are_on_the_books(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    (batch,) = ledger.batches(MONTH)
    assert batch.status is BatchStatus.RUNNING  # a 500 after the model may have run: uncertain
    assert batch.gateway_retries == 2
    assert len(faulty.charges()) == 2  # the gateway's two attempts; its own made nothing
    rows = [r for r in ledger.spend(MONTH) if r.state is not SpendState.REFUNDED]
    # Its send (possibly charged: nothing tells a 500 before the model ran from one after)
    # and the gateway's two: every charge is on the books.
    assert len(rows) == 3 and {r.state for r in rows} == {SpendState.POSSIBLE}


@pytest.mark.parametrize(
    ("kind", "faulty"), cases((BATCH,), "create:gateway_retries#1;retries=1"), indirect=["faulty"]
)
def test_a_jobs_gateway_retries_are_on_the_books_for_every_batch_it_carried(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    """A remade job is paid for every line again: each of its batches' possible charge."""
    run(tmp_path, 75)  # three ledger batches, one job
    assert statuses(ledger) == {"completed": 75}
    batches = ledger.batches(MONTH)
    assert {b.gateway_retries for b in batches} == {1}
    rows = [r for r in ledger.spend(MONTH) if r.state is not SpendState.REFUNDED]
    assert Counter(r.batch_id for r in rows) == {b.batch_id: 2 for b in batches}
    assert set(faulty.charged_per_post().values()) == {2}
    for batch in batches:  # each extra at the batch's own estimate, not one batch's for all
        texts = [text for _, text in batch.request or []]
        extra = [r for r in rows if r.batch_id == batch.batch_id and r.state is SpendState.POSSIBLE]
        request_text = Settings().analysis_in_use().request_text
        price = Settings().price()  # the Batch API's: at its discount
        assert price is not None
        assert [r.estimated_cost for r in extra] == [estimate(price, request_text, texts)]


@pytest.mark.parametrize(("kind", "faulty"), cases((BATCH,), "list:html@1.0"), indirect=["faulty"])
def test_a_look_for_orphans_that_gives_no_answer_leaves_them_waiting(
    prefect_harness: None, faulty: Sim, ledger: Ledger, ledger_url: str, tmp_path: Path
) -> None:
    """A run made a job and could keep its id nowhere (the ledger and the spill both failed):
    the job is paid for, and only the upstream's list can find it. The list answers with a
    captive portal's page: no answer. The batches wait, even with a yes to resubmit."""
    from flows.dispatch import RunStopped

    month_spill = Settings().spill_file(MONTH)
    month_spill.mkdir(parents=True)  # the spill cannot be written either: a folder in its way
    with (
        failing_writes(ledger_url, "UPDATE submissions SET upstream_job_id"),
        pytest.raises(RunStopped),
    ):
        run(tmp_path, 25)
    month_spill.rmdir()
    (batch,) = ledger.batches(MONTH)
    assert (batch.status, batch.upstream_task_id) == (BatchStatus.RUNNING, None)
    assert len(faulty.charges()) == 1

    run(tmp_path, 25, poll=True, resubmit=True)
    assert len(faulty.charges()) == 1  # not sent again on the strength of no answer
    assert ledger.batch(batch.batch_id).status is BatchStatus.RUNNING

    faulty.clear_faults()  # the list answers now: the job is found and read, not paid again
    run(tmp_path, 25, poll=True, resubmit=True)
    assert statuses(ledger) == {"completed": 25}
    assert len(faulty.charges()) == 1


@pytest.mark.parametrize(
    ("kind", "faulty"), cases((TASK_API,), "task:task_failed#1"), indirect=["faulty"]
)
def test_a_failed_answers_reported_usage_is_booked(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    first = ledger.batches(MONTH)[0]
    assert first.failure_kind is FailureKind.UPSTREAM_FAILED
    charge = faulty.charges()[0]
    (row,) = [r for r in ledger.spend(MONTH) if r.batch_id == first.batch_id]
    assert row.state is SpendState.WASTED
    assert (row.input_tokens, row.output_tokens) == (
        charge["input_tokens"],
        charge["output_tokens"],
    )
    assert row.cost == cost_of(PRICE, Usage(charge["input_tokens"], charge["output_tokens"]))


@pytest.mark.parametrize("kind", [BATCH])
def test_under_a_budget_submissions_start_in_order(
    prefect_harness: None,
    sim: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batches of very different sizes, one per job, three jobs at a time, and a budget that
    a big batch crosses while a small later one would still fit. The month's forecast crosses
    it too, so a person is asked before the first job, and nobody answers: nothing is sent,
    and no small batch slipped past the big one. (The hold of a batch that crosses a budget
    the forecast did not, in order, is `tests/ledger/test_submission_marking.py`'s.)"""
    from flows.dispatch import RunStopped

    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "3")
    monkeypatch.setenv("POSTLEDGER_MAX_SUBMISSION_BATCHES", "1")
    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "1")
    monkeypatch.setenv("POSTLEDGER_APPROVAL_TIMEOUT", "1")
    monkeypatch.setenv("POSTLEDGER_APPROVAL_POLL", "0.2")
    texts = ["short", "x" * 4000, "short", "short"]
    path = write_jsonl(
        tmp_path / "posts.jsonl",
        [json.dumps({"id": f"p{i}", "text": text}) for i, text in enumerate(texts)],
    )
    request_text = Settings().analysis_in_use().request_text
    price = Settings().price()  # the Batch API's: at its discount
    assert price is not None and price.discount_percent == 50
    small = estimate(price, request_text, ["short"])
    big = estimate(price, request_text, ["x" * 4000])
    # The big one never fits, even once the first is settled below its estimate; a small
    # one after it would.
    monkeypatch.setenv("POSTLEDGER_MAX_COST", str(small + big // 2))
    from flows.monthly import monthly_posts

    with pytest.raises(RunStopped, match="forecast .* past its budget"):
        monthly_posts(month=MONTH, posts_path=str(path))
    assert [b.batch_id for b in ledger.batches(MONTH) if b.sends] == []
    assert sim.charges() == []
    (asked,) = ledger.approvals.approvals(MONTH)
    assert asked.kind is Question.BUDGET and asked.answer is Answer.TIMED_OUT
