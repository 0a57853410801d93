"""The money edges, on the real ledger (SQLite here, PostgreSQL in the suite's second pass): the
attempt cap and the one split per post across restarts, the one probe per upstream, a run that
lost its month, per-month spill files imported once, gateway retries on the books, and the
checks made before anything is marked running. Each test is named after the defect it closes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session

from postledger.batches.output import check_output
from postledger.batches.posts import Post
from postledger.defaults import DEFAULT_PRICES
from postledger.failures.policy import Failure, Reach, after_failure, after_output
from postledger.guards.breaker import BreakerHeld, Signal
from postledger.guards.charges import BudgetHeld
from postledger.guards.spill import Spill, SpillFailed, SpillKind
from postledger.ledger import Ledger
from postledger.preflight import problems_of
from postledger.record import month_lease
from postledger.record.claims import STALE
from postledger.record.models import (
    Answer,
    BatchStatus,
    BreakerLevel,
    FailureKind,
    MonthRunRecord,
    PostStatus,
    Question,
    SpendState,
    utcnow,
)
from postledger.record.month_lease import MonthBusy, MonthLeases, MonthLost
from postledger.settings import Limits, Settings
from simulator.model import write_output
from tests.support.ledgers import asked, priced, started

MONTH, OTHER = "2026-10", "2026-11"
UPSTREAM = "sim-upstream"
UNUSABLE = "this is not JSON at all"


def posts(n: int, prefix: str = "p") -> list[Post]:
    return [Post(f"{prefix}{i:03d}", f"post {i}: why is the app slow?", i + 1) for i in range(n)]


def planned(ledger: Ledger, month: str, n: int, *, max_posts: int = 25) -> list[str]:
    ledger.sync_posts(month, posts(n, prefix=month[-2:]), model="m", analysis=asked())
    return [b.batch_id for b in ledger.plan(month, max_posts=max_posts, max_chars=10_000).batches]


def deliver(ledger: Ledger, batch_id: str, raw: str, limits: Limits) -> None:
    """The upstream answered with `raw`: saved, checked, and the decision applied."""
    ledger.save_output(batch_id, raw, {"input_tokens": 10, "output_tokens": 10})
    check = check_output(raw, ledger.batch(batch_id).post_ids, asked())
    decision = after_output(ledger.batch(batch_id), ledger.posts_of(batch_id), check, limits)
    ledger.apply(batch_id, decision, check)


# --- the attempt cap and one split per lineage live on the posts -----------------------------


def test_bisection_never_sends_a_post_past_its_attempt_cap(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    limits = Limits(max_attempts=1)
    (batch_id,) = planned(ledger, MONTH, 4)
    ledger.mark_running(batch_id, max_attempts=limits.max_attempts)
    deliver(ledger, batch_id, UNUSABLE, limits)  # unusable: would be split into halves

    assert [b.batch_id for b in ledger.batches(MONTH)] == [batch_id]  # no half was made
    failed = ledger.posts(MONTH, PostStatus.FAILED)
    assert len(failed) == 4 and {p.failure_kind for p in failed} == {FailureKind.ATTEMPTS_EXHAUSTED}
    assert all(p.attempts == 1 for p in failed)
    ledger.close()


def test_split_once_survives_replanning_and_restarts(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    limits = Limits(max_attempts=5)
    (batch_id,) = planned(ledger, MONTH, 4)
    ledger.mark_running(batch_id, max_attempts=limits.max_attempts)
    deliver(ledger, batch_id, UNUSABLE, limits)
    halves = ledger.batches(MONTH, BatchStatus.QUEUED)
    assert [len(h.post_ids) for h in halves] == [2, 2]
    assert all(p.split for p in ledger.posts(MONTH))

    # A restart (or a budget stop) dissolves the unsent halves: their posts are planned anew,
    # here all four into one batch, and remember that they were split.
    assert ledger.replan_unsent(MONTH) == 4
    (again,) = ledger.plan(MONTH, max_posts=25, max_chars=10_000).batches
    assert again.split_from is None and len(again.post_ids) == 4
    ledger.mark_running(again.batch_id, max_attempts=limits.max_attempts)
    deliver(ledger, again.batch_id, UNUSABLE, limits)

    assert not ledger.batches(MONTH, BatchStatus.QUEUED)  # not split a second time
    failed = ledger.posts(MONTH, PostStatus.FAILED)
    assert len(failed) == 4 and {p.failure_kind for p in failed} == {FailureKind.BATCH_INVALID}
    assert all(p.attempts == 2 for p in failed)
    ledger.close()


def test_a_person_retry_grants_fresh_attempts_and_the_cap_holds_after_it(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    limits = Limits(max_attempts=1)
    (batch_id,) = planned(ledger, MONTH, 2)
    ledger.mark_running(batch_id, max_attempts=1)
    good = write_output([(p.post_id, p.text) for p in ledger.posts(MONTH)][:1])
    deliver(ledger, batch_id, good, limits)  # one post has no item: at its cap, it fails
    (failed,) = ledger.posts(MONTH, PostStatus.FAILED)
    assert failed.failure_kind is FailureKind.ATTEMPTS_EXHAUSTED

    assert ledger.retry_failed(MONTH, {FailureKind.ATTEMPTS_EXHAUSTED}) == 1
    (retry,) = ledger.plan(MONTH, max_posts=25, max_chars=10_000, max_attempts=1).batches
    ledger.mark_running(retry.batch_id, max_attempts=1)  # the person's yes: one more attempt
    (post,) = ledger.posts_of(retry.batch_id)
    assert (post.attempts, post.extra_attempts) == (2, 1)
    ledger.close()


def test_planning_fails_a_post_with_no_attempt_left_instead_of_sending_it(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    (batch_id,) = planned(ledger, MONTH, 2)
    ledger.mark_running(batch_id, max_attempts=1)
    first = ledger.posts(MONTH)[0]
    answered = write_output([(first.post_id, first.text)])  # no item for the second post
    deliver(ledger, batch_id, answered, Limits(max_attempts=5))
    (post,) = ledger.posts(MONTH, PostStatus.PENDING)  # a business retry, planned later

    report = ledger.plan(MONTH, max_posts=25, max_chars=10_000, max_attempts=1)
    assert report.batches == []
    (post,) = [p for p in ledger.posts(MONTH) if p.post_id == post.post_id]
    assert (post.status, post.failure_kind) == (PostStatus.FAILED, FailureKind.ATTEMPTS_EXHAUSTED)
    ledger.close()


# --- one probe per upstream, across months and runs, checked where a batch starts ------------


def _probe(ledger: Ledger) -> None:
    ledger.approvals.signal(UPSTREAM, Signal.TRANSPORT_FAILURE, "a batch failed", month=MONTH)
    assert ledger.approvals.breaker(UPSTREAM).level is BreakerLevel.PROBE


def test_the_probe_is_one_batch_per_upstream_across_months_and_runs(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    a1, a2 = planned(ledger, MONTH, 4, max_posts=2)
    (b1,) = planned(ledger, OTHER, 2)
    ledger.leases.claim(MONTH, "run-a")
    ledger.leases.claim(OTHER, "run-b")
    _probe(ledger)

    ledger.mark_running(a1, UPSTREAM, holder="run-a")
    for held in (
        ledger.mark_running(a2, UPSTREAM, holder="run-a"),  # the asking month's own second batch
        ledger.mark_running(b1, UPSTREAM, holder="run-b"),  # another month's batch
    ):
        assert isinstance(held, BreakerHeld) and a1 in held.reason
    assert {b.batch_id for b in ledger.batches(MONTH, BatchStatus.RUNNING)} == {a1}
    assert ledger.batch(b1).status is BatchStatus.QUEUED  # nothing changed for the held one

    # A probe that takes hours (a Batch API job) still holds it: no hour-long hold-out.
    with Session(ledger.engine) as session:
        batch = session.get(type(ledger.batch(a1)), a1)
        assert batch is not None
        batch.started_at = utcnow()  # a probe sent now ...
        session.add(batch)
        breaker = ledger.approvals.breaker(UPSTREAM)
        breaker.changed_at = utcnow() - timedelta(hours=3)  # ... into a probe 3 hours old
        session.add(breaker)
        session.commit()
    assert isinstance(ledger.mark_running(b1, UPSTREAM, holder="run-b"), BreakerHeld)
    ledger.close()


def test_a_probe_left_by_a_dead_run_does_not_hold_the_upstream(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    (a1,) = planned(ledger, MONTH, 2)
    (b1,) = planned(ledger, OTHER, 2)
    ledger.leases.claim(MONTH, "run-a")
    ledger.leases.claim(OTHER, "run-b")
    _probe(ledger)
    ledger.mark_running(a1, UPSTREAM, holder="run-a")
    with Session(ledger.engine) as session:  # run-a died: its heartbeat stopped long ago
        claim = session.get(MonthRunRecord, MONTH)
        assert claim is not None
        claim.heartbeat_at = utcnow() - STALE - timedelta(seconds=5)
        session.add(claim)
        session.commit()
    ledger.mark_running(b1, UPSTREAM, holder="run-b")
    assert ledger.batch(b1).status is BatchStatus.RUNNING
    ledger.close()


def test_a_probe_left_uncertain_does_not_hold_the_upstream_forever(ledger_url: str) -> None:
    """A 429 while polling the probe leaves it uncertain, and is no transport failure: the
    breaker stays in probe. The batch is for recovery now, so the next one may probe."""
    ledger = Ledger(ledger_url)
    a1, a2 = planned(ledger, MONTH, 4, max_posts=2)
    ledger.leases.claim(MONTH, "run-a")
    _probe(ledger)
    batch, sent = started(ledger.mark_running(a1, UPSTREAM, holder="run-a"))
    ledger.record_task_id(a1, "task_1")
    limited = Failure(FailureKind.RATE_LIMITED, "HTTP 429 while polling", Reach.NEVER)
    decision = after_failure(
        ledger.batch(a1), sent, limited, idempotent=False, limits=Limits(), now=utcnow()
    )
    assert decision.uncertain and decision.signal is None
    ledger.apply(a1, decision, upstream=UPSTREAM)

    assert ledger.batch(a1).status is BatchStatus.RUNNING  # still for recovery to poll
    started(ledger.mark_running(a2, UPSTREAM, holder="run-a"))  # not held by it
    ledger.close()


# --- a run that lost its month starts nothing --------------------------------------------------


def test_a_run_that_lost_its_month_starts_no_batch(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    first, second = planned(ledger, MONTH, 4, max_posts=2)
    ledger.leases.claim(MONTH, "run-a")
    ledger.mark_running(first, holder="run-a")
    take_over(ledger, "run-b")  # run-a froze, so another host took the month over

    with pytest.raises(MonthLost, match="no longer holds 2026-10"):
        ledger.mark_running(second, holder="run-a")
    with pytest.raises(MonthLost):
        ledger.leases.beat(MONTH, "run-a")  # its heartbeat says so too
    assert ledger.batch(second).status is BatchStatus.QUEUED
    assert all(p.attempts == 0 for p in ledger.posts_of(second))
    ledger.close()


def test_a_run_that_lost_its_month_writes_nothing_more_of_it(ledger_url: str) -> None:
    """The claim is every paid-path write's fence: a run that lost its month to another (its
    heartbeat missed) settles nothing of it any more; the run that holds it now does."""
    ledger = Ledger(ledger_url)
    first, _ = planned(ledger, MONTH, 4, max_posts=2)
    ledger.leases.claim(MONTH, "run-a")
    ledger.mark_running(first, holder="run-a")
    ledger.record_task_id(first, "task_1", holder="run-a")
    take_over(ledger, "run-b")
    before = [(e.seq, e.why) for e in ledger.events(MONTH)]
    writes: list[Callable[[], object]] = [
        lambda: ledger.record_task_id(first, "task_2", holder="run-a"),
        lambda: ledger.count_request_retry(first, holder="run-a"),
        lambda: ledger.count_gateway_retries(first, 1, holder="run-a"),
        lambda: ledger.save_output(first, "[]", None, holder="run-a"),
    ]
    for write in writes:
        with pytest.raises(MonthLost):
            write()
    batch = ledger.batch(first)
    assert (batch.upstream_task_id, batch.request_retries, batch.gateway_retries) == (
        "task_1",
        0,
        0,
    )
    assert batch.status is BatchStatus.RUNNING and batch.raw_output is None
    assert [(e.seq, e.why) for e in ledger.events(MONTH)] == before
    ledger.save_output(first, "[]", None, holder="run-b")  # the holder now settles it
    assert ledger.batch(first).status is BatchStatus.RECEIVED
    ledger.close()


def test_a_host_whose_clock_runs_ahead_does_not_take_a_live_runs_month(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another host's clock is two minutes ahead of this one's: a heartbeat this host wrote a
    moment ago must not look stale to it. Heartbeats are stamped and judged by the database's
    clock, the one clock both hosts share."""
    ledger = Ledger(ledger_url)
    planned(ledger, MONTH, 2, max_posts=2)
    ledger.leases.claim(MONTH, "run-a")  # a live run, heartbeat just now
    ahead = datetime.now(UTC) + timedelta(seconds=120)
    monkeypatch.setattr(month_lease, "utcnow", lambda: ahead, raising=False)  # that host's
    other_host = MonthLeases(ledger._locks)
    other_host._host = "host-b"
    with pytest.raises(MonthBusy):
        other_host.claim(MONTH, "run-b")
    ledger.close()


def take_over(ledger: Ledger, holder: str) -> None:
    """The month's holder froze (no heartbeat for over 90 s, from another host): `holder`
    takes the month over."""
    with Session(ledger.engine) as session:
        claim = session.get(MonthRunRecord, MONTH)
        assert claim is not None
        claim.heartbeat_at, claim.host = utcnow() - STALE - timedelta(seconds=1), "other-host"
        session.add(claim)
        session.commit()
    ledger.leases.claim(MONTH, holder)


# --- the spill: one file per month, locked against a concurrent import, imported once -----------


def test_spill_files_are_per_month_and_an_import_takes_only_its_month(tmp_path: Path) -> None:
    settings = Settings(spill_path=tmp_path / "ledger.db.spill.jsonl")
    october, november = Spill(settings.spill_file(MONTH)), Spill(settings.spill_file(OTHER))
    assert october.path != november.path
    october.add(SpillKind.TASK_ID, f"{MONTH}-b0001", task_id="t1")
    november.add(SpillKind.TASK_ID, f"{OTHER}-b0001", task_id="t2")

    taken = october.take(lambda records: [r["batch_id"] for r in records])
    assert taken == [f"{MONTH}-b0001"]
    assert not october.path.exists() and november.path.exists()
    assert [r["task_id"] for r in november.records()] == ["t2"]


def test_a_spill_written_while_it_is_imported_is_never_lost(tmp_path: Path) -> None:
    spill = Spill(tmp_path / "spill-2026-10.jsonl")
    spill.add(SpillKind.REQUEST_RETRY, f"{MONTH}-b0001")
    imported: list[str] = []
    writing = threading.Event()

    def importer(records: list[dict[str, object]]) -> None:
        writing.set()
        writer.join(timeout=0.5)  # the writer waits on the lock meanwhile
        imported.extend(str(r["id"]) for r in records)

    def write() -> None:
        if writing.wait(5):
            spill.add(SpillKind.REQUEST_RETRY, f"{MONTH}-b0002")

    writer = threading.Thread(target=write)
    writer.start()
    spill.take(importer)
    writer.join(5)
    left = [str(r["id"]) for r in spill.records()]  # appended to the next file, not the old one
    assert len(imported) == 1 and len(left) == 1 and set(imported).isdisjoint(left)


def test_importing_the_same_spill_twice_counts_each_record_once(
    ledger_url: str, tmp_path: Path
) -> None:
    ledger = Ledger(ledger_url)
    (batch_id,) = planned(ledger, MONTH, 2)
    ledger.mark_running(batch_id)
    spill = Spill(tmp_path / "spill-2026-10.jsonl")
    spill.add(SpillKind.REQUEST_RETRY, batch_id)
    spill.add(SpillKind.TASK_ID, batch_id, task_id="task_1")
    records = spill.records()
    spill.path.unlink()
    # A crash between the import and moving the file aside: the next run reads it again.
    assert ledger.import_spill(records) == 2
    assert ledger.import_spill(records) == 0
    batch = ledger.batch(batch_id)
    assert (batch.request_retries, batch.upstream_task_id) == (1, "task_1")
    ledger.close()


def test_a_spill_that_cannot_be_written_says_the_paid_fact_out_loud(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the spill folder should be")
    spill = Spill(blocker / "spill-2026-10.jsonl")
    with pytest.raises(SpillFailed, match="task_42") as failed:
        spill.add(SpillKind.TASK_ID, f"{MONTH}-b0007", task_id="task_42")
    assert f"{MONTH}-b0007" in str(failed.value) and "could be polled" not in str(failed.value)


# --- what a gateway retried on its own is on the books --------------------------------------


def test_gateway_retries_are_possible_charges_of_the_batch(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    (batch_id,) = planned(ledger, MONTH, 2)
    price = DEFAULT_PRICES["sim-analyst-1"]
    ledger.mark_running(batch_id, pricing=priced(price))
    ledger.count_gateway_retries(batch_id, 2, pricing=priced(price))
    deliver(
        ledger, batch_id, write_output([(p.post_id, p.text) for p in ledger.posts(MONTH)]), Limits()
    )

    assert ledger.batch(batch_id).gateway_retries == 2
    states = sorted(row.state for row in ledger.spend(MONTH))
    assert states == sorted([SpendState.CONFIRMED, SpendState.POSSIBLE, SpendState.POSSIBLE])
    ledger.close()


# --- the budget holds a batch, and that is a value -------------------------------------------


def test_a_batch_the_budget_holds_changes_nothing_until_a_person_says_go_on(
    ledger_url: str,
) -> None:
    ledger = Ledger(ledger_url)
    first, second = planned(ledger, MONTH, 4, max_posts=2)
    price = DEFAULT_PRICES["sim-analyst-1"]
    budget = started(ledger.mark_running(first, pricing=priced(price), max_cost=10**9))
    cost = ledger.spend(MONTH)[0].estimated_cost
    assert budget.batch.status is BatchStatus.RUNNING and cost is not None

    held = ledger.mark_running(second, pricing=priced(price), max_cost=cost)
    assert isinstance(held, BudgetHeld) and "would cross it" in held.reason
    assert ledger.batch(second).status is BatchStatus.QUEUED and ledger.batch(second).sends == 0
    assert len(ledger.spend(MONTH)) == 1  # nothing booked for the held one

    asked = ledger.approvals.ask(
        MONTH, "sim", held.reason, flow_run_id=None, prefect_api_url=None, kind=Question.BUDGET
    )
    assert asked.id is not None
    ledger.approvals.close(asked.id, Answer.CONTINUE, note="", by="test")
    started(ledger.mark_running(second, pricing=priced(price), max_cost=cost))
    assert len(ledger.spend(MONTH)) == 2
    ledger.close()


# --- checked before anything is marked running -------------------------------------------------


def test_a_budget_with_no_price_is_a_configuration_error(tmp_path: Path) -> None:
    settings = Settings(
        upstream_url="http://127.0.0.1:9",
        max_cost=1,
        model="a-model-with-no-price",
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}",
    )
    (problem,) = problems_of(settings)
    assert "no price" in problem and "POSTLEDGER_PRICES" in problem


def test_no_upstream_and_a_shared_ledger_without_spill_location_are_refused(
    tmp_path: Path,
) -> None:
    settings = Settings(database_url="postgresql+psycopg://u@db.example/ledger")
    problems = problems_of(settings)
    assert any("POSTLEDGER_UPSTREAM_URL" in p for p in problems)
    assert any("POSTLEDGER_SPILL_PATH" in p and "shared" in p for p in problems)
    keyless = Settings(
        upstream_kind="openai_chat",
        upstream_url="https://api.example.com/v1",
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}",
    )
    assert any("POSTLEDGER_API_KEY" in p for p in problems_of(keyless))
