"""The money edges through the whole flow, over real HTTP against the simulator: what a paid batch
whose answer never came becomes, what a configuration error touches (nothing), and what a
ledger write that fails in the middle of a paid batch does. The evidence is the ledger and the
simulator's charge log. Each test is named after the defect it closes."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from postledger.guards.spill import Spill
from postledger.ledger import Ledger
from postledger.record.models import BatchStatus, Charge, PostStatus, SpendState
from postledger.recovery.steps import RecoveryAction, recovery_plan
from postledger.settings import Settings
from postledger.upstreams import facts_of
from tests.support.ledger_backend import sqlite_ledger_only
from tests.support.months import MONTH
from tests.support.months import month_posts as month_file
from tests.support.months import run_flow as run
from tests.support.simulators import Sim, start_sim
from tests.support.waiting import in_background

pytestmark = pytest.mark.usefixtures("fast_retries")
FAST_TIMINGS = {"read_timeout": "1", "poll_wait": "0.2", "request_retries": "1"}


# --- a paid task with a saved id is never abandoned -------------------------------------------


@pytest.mark.on_postgres  # a task left running, polled next run
@pytest.mark.parametrize(
    ("faulty", "deadline"),
    [
        # Every poll fails: looked at again, with a backoff, until our deadline (2 s here).
        ({"faults": "poll:http_502@1"}, "2"),
        ({"latency": 3.0}, "0.5"),  # still running when our deadline passes
    ],
    indirect=["faulty"],
    ids=["poll-fails", "deadline-passes"],
)
def test_a_paid_task_whose_poll_fails_is_polled_by_the_next_run_not_paid_again(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    deadline: str,
) -> None:
    monkeypatch.setenv("POSTLEDGER_TASK_DEADLINE", deadline)
    run(tmp_path, 25)

    (batch,) = ledger.batches(MONTH)
    assert batch.upstream_task_id and batch.charge is Charge.CONFIRMED
    assert batch.status is BatchStatus.RUNNING  # uncertain: the task may still deliver
    assert {(p.status, p.attempts, p.failure_kind) for p in ledger.posts(MONTH)} == {
        (PostStatus.RUNNING, 1, None)
    }
    assert ledger.retry_failed(MONTH) == 0  # nothing a person could resend by mistake
    with ledger.plain() as reader:
        (step,) = recovery_plan(reader, MONTH, Settings()).steps
    assert (step.batch_id, step.action) == (batch.batch_id, RecoveryAction.POLL)

    faulty.clear_faults()
    monkeypatch.setenv("POSTLEDGER_TASK_DEADLINE", "3600")
    run(tmp_path, 25, poll=True)  # the next run, with the person's yes to poll

    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    assert ledger.batch(batch.batch_id).upstream_task_id == batch.upstream_task_id
    assert len(faulty.charges()) == 1  # polled, never paid again
    assert set(faulty.charged_per_post().values()) == {1}


@pytest.mark.parametrize("faulty", ["create:http_500_after_create#1"], indirect=True)
def test_an_ambiguous_create_is_not_resent_unless_the_upstream_is_said_to_honour_keys(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POSTLEDGER_UPSTREAM_IDEMPOTENT")  # the default: not known to
    assert facts_of(Settings()).honours_keys is False
    run(tmp_path, 25)

    assert faulty.stats()["requests"]["create"] == 1  # no request retry of a create
    (batch,) = ledger.batches(MONTH)
    assert (batch.status, batch.charge) == (BatchStatus.RUNNING, Charge.POSSIBLE)
    (spend,) = ledger.spend(MONTH)
    assert spend.state is SpendState.POSSIBLE  # what the upstream did charge is on the books
    assert len(faulty.charges()) == 1
    with ledger.plain() as reader:
        (step,) = recovery_plan(reader, MONTH, Settings()).steps
    assert step.action is RecoveryAction.RESUBMIT and "charged twice" in step.why


# --- configuration errors touch nothing ----------------------------------------------------


@pytest.mark.on_postgres  # nothing written
def test_a_budget_with_no_price_stops_the_run_before_anything_is_marked_running(
    prefect_harness: None,
    sim: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.dispatch import RunStopped

    monkeypatch.setenv("POSTLEDGER_MAX_COST", "1")
    monkeypatch.setenv("POSTLEDGER_MODEL", "a-model-with-no-price")
    with pytest.raises(RunStopped, match="no price for the model 'a-model-with-no-price'"):
        run(tmp_path, 60)
    assert ledger.posts(MONTH) == [] and ledger.batches(MONTH) == []
    assert sim.charges() == []


def test_a_deployment_with_no_upstream_marks_nothing_running(
    prefect_harness: None, ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.dispatch import RunStopped

    monkeypatch.delenv("POSTLEDGER_UPSTREAM_URL", raising=False)
    with pytest.raises(RunStopped, match="no upstream is configured"):
        run(tmp_path, 60)
    assert ledger.posts(MONTH) == [] and ledger.batches(MONTH) == []
    assert ledger.spend(MONTH) == []


def test_a_404_on_the_create_is_a_configuration_error_not_a_lost_task(
    prefect_harness: None,
    sim: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.dispatch import RunStopped

    wrong = f"{sim.url}/wrong-base"
    monkeypatch.setenv("POSTLEDGER_UPSTREAM_URL", wrong)
    with pytest.raises(RunStopped, match="wrong-base"):
        run(tmp_path, 60)
    assert sim.charges() == []
    sent = [b for b in ledger.batches(MONTH) if b.sends]
    assert 1 <= len(sent) <= 2 < len(ledger.batches(MONTH))  # the run stopped at once
    assert {(p.status, p.attempts) for p in ledger.posts(MONTH)} <= {
        (PostStatus.PENDING, 0),
        (PostStatus.QUEUED, 0),
    }
    assert {row.state for row in ledger.spend(MONTH)} == {SpendState.REFUNDED}


# --- a ledger write that fails mid-batch stops new batches ------------------------------------


@pytest.fixture
def slow_create(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    """The create is charged at once, its answer held for 2 s: a window to break the ledger."""
    yield from start_sim(monkeypatch, latency=0.2, create_delay=2.0)


@sqlite_ledger_only  # the fault is a real SQLite write lock held past the busy timeout
def test_a_task_id_the_ledger_cannot_take_stops_new_batches_and_is_spilled(
    prefect_harness: None,
    slow_create: Sim,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.dispatch import RunStopped
    from flows.monthly import monthly_posts

    monkeypatch.setenv("POSTLEDGER_SQLITE_BUSY_TIMEOUT", "1")
    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")
    monkeypatch.setenv("POSTLEDGER_READ_TIMEOUT", "10")  # the held answer arrives, not a retry
    posts = month_file(tmp_path, 50)
    thread, outcome = in_background(lambda: monthly_posts(month=MONTH, posts_path=posts))
    deadline = time.monotonic() + 60
    while not slow_create.charges() and time.monotonic() < deadline:
        time.sleep(0.02)
    blocker = sqlite3.connect(str(tmp_path / "ledger.db"), isolation_level=None, timeout=10)
    blocker.execute("BEGIN IMMEDIATE")  # the create's answer now finds the ledger locked
    thread.join(60)
    blocker.execute("ROLLBACK")
    blocker.close()

    assert isinstance(outcome.get("error"), RunStopped), outcome
    assert "a ledger write failed" in str(outcome["error"])
    assert len(slow_create.charges()) == 1  # the second batch never started
    spilled = Spill(Settings().spill_file(MONTH)).records()
    (task_id,) = [r["task_id"] for r in spilled if r["kind"] == "task_id"]
    assert task_id == slow_create.charges()[0]["task_id"]

    monthly_posts(month=MONTH, posts_path=posts, poll=True)  # the database is back
    ledger = Ledger(ledger_url)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    assert set(slow_create.charged_per_post().values()) == {1}  # nobody paid twice
    ledger.close()
