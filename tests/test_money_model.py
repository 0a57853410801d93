"""The money rules as a Hypothesis state machine: random batches through the REAL ledger (a
SQLite file per example; a fresh PostgreSQL database per example in the suite's PostgreSQL
pass) and the REAL policy, recovery and breaker code, against a small model upstream that
keeps its own charge log (`tests/money_model.py`). No Prefect, no HTTP, no mock of ours.

The machine plays the part of `tasks/batch.py` for each batch — mark_running -> [create] ->
record_task_id -> [poll] -> save_output -> finish_from_output, or failure_of + after_failure
+ apply on an error — and of `flows/monthly.py` on a restart (R21-R24). Between any two steps
a batch may be abandoned (a crash: its ledger rows stay as they are). Two months share one
upstream's breaker (R18); a person answers breaker, budget and recovery questions.

After every step the money invariants are checked (see `MoneyModel.money_invariants`); at the
end of each example the month is run to its end without faults (invariant 8).

POSTLEDGER_MODEL_EXAMPLES raises the number of examples (`bench/money_model.py`).
"""

from __future__ import annotations

import functools
import os
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, TypeVar, cast

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlmodel import Session, select

from postledger.batches.posts import Post
from postledger.failures.classify import failure_of
from postledger.failures.policy import Failure, Limits, after_failure
from postledger.guards.breaker import BreakerHeld
from postledger.guards.charges import BudgetHeld, spend_summary
from postledger.guards.spend import Price, estimate
from postledger.ledger import Ledger
from postledger.record.models import (
    Answer,
    ApprovalRecord,
    BatchRecord,
    BatchStatus,
    BreakerEventRecord,
    BreakerLevel,
    BreakerRecord,
    FailureKind,
    PostCountRecord,
    PostRecord,
    PostStatus,
    Question,
    SpendRecord,
    SpendState,
    utcnow,
)
from postledger.record.month_lease import MonthLost
from postledger.record.rows import interrupted as interrupted_batches
from postledger.recovery.interrupted import finish_from_output, finish_saved_outputs
from postledger.recovery.steps import RecoveryAction, plan_recovery
from postledger.upstreams.errors import UpstreamError
from tests.conftest import LEDGER_ON_POSTGRES
from tests.money_model import (
    PROMPT,
    CreateFault,
    ModelTask,
    ModelUpstream,
    PollFault,
    TaskOutcome,
    create_failure,
    failed_task_error,
    fresh_ledger_url,
    output_of,
    poll_error,
    unknown_task_error,
    usage_of,
)

MONTHS = ("2026-10", "2026-11")  # two months, one upstream: they share its breaker
UPSTREAM = "model-upstream"
MODEL = "model-1"
PRICE = Price(input=1_000_000, output=1_000_000)  # one micro-unit a token each way
MAX_POSTS, MAX_CHARS = 2, 120
FINAL = (BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.CANCELLED)
LATER = timedelta(hours=2)  # "time passes": every wait (at most max_wait) is over
MONTH = st.sampled_from(MONTHS)
WHICH = st.integers(0, 1)  # which of the months a rule may act on
PICK = st.integers(0, 7)
CRASH = st.sampled_from([False, False, False, True])  # the run dies right after this step


class Phase(StrEnum):
    """How far an in-flight batch got in `tasks/batch.py`'s order of calls."""

    MARKED = "marked"  # mark_running committed: the create may be sent
    RECORDED = "recorded"  # the task id is saved: poll it
    OUTPUT = "output"  # the raw output is saved: validate it


@dataclass
class Run:
    """One run of a month: its own Ledger object (a process of its own) and its claim."""

    month: str
    holder: str
    ledger: Ledger
    stopped: str | None = None  # a decision said no further batch may start in this run
    budget_held: bool = False


@dataclass
class InFlight:
    batch_id: str
    run: Run
    phase: Phase
    posts: list[PostRecord]  # as `tasks/batch.py` keeps them: from mark_running, or read
    send: int
    request: list[tuple[str, str]]
    key: str
    task_id: str | None = None
    resume: bool = False  # a poll of an interrupted batch (R23): no mark_running, no create

    @property
    def month(self) -> str:
        return self.run.month


@dataclass
class Seen:
    """What the last look at the ledger found (after every step): the rules' preconditions
    read it instead of the database."""

    plannable: set[str] = field(default_factory=set)  # months with pending or waiting posts
    queued: set[str] = field(default_factory=set)  # months with queued batches
    interrupted: set[str] = field(default_factory=set)  # months with running/received batches
    retryable: set[str] = field(default_factory=set)  # months with failed posts worth a retry
    level: BreakerLevel = BreakerLevel.NORMAL


def choose(months: set[str], which: int) -> str:
    ordered = sorted(months)
    return ordered[which % len(ordered)]


# What the examples did, summed over a session (bench/money_model.py prints it).
STATS: Counter[str] = Counter()

F = TypeVar("F", bound=Callable[..., None])


def step(function: F) -> F:
    """Marks the machine dirty while a rule runs: a rule that raised leaves it dirty, and the
    teardown then does not run the month to its end on top of the failure."""

    @functools.wraps(function)
    def wrapper(self: MoneyModel, *args: Any, **kwargs: Any) -> None:
        self.dirty = True
        STATS[f"rule {function.__name__}"] += 1
        function(self, *args, **kwargs)
        self.dirty = False

    return cast("F", wrapper)


def examples() -> int:
    """A bench run's number of examples (0: the suite's own). tests/conftest.py clears every
    POSTLEDGER_* variable but POSTLEDGER_TEST_*, so under pytest the second name is the one
    that arrives; bench/money_model.py sets it from the first."""
    for name in ("POSTLEDGER_TEST_MODEL_EXAMPLES", "POSTLEDGER_MODEL_EXAMPLES"):
        if value := os.environ.get(name):
            return int(value)
    return 0


class MoneyModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dirty = False
        self.stack = ExitStack()
        self.url = self.stack.enter_context(fresh_ledger_url())
        self.ledger = Ledger(self.url)
        self.stack.callback(self.ledger.close)
        self.observer = self.ledger  # what the invariants read through
        self.runs: dict[str, Run] = {}
        self.stale_holders: dict[str, list[str]] = {month: [] for month in MONTHS}
        self.in_flight: list[InFlight] = []
        self.upstream = ModelUpstream(honour_keys=True)
        self.honour = True
        self.max_attempts = 2
        self.limits = Limits()
        self.max_cost: int | None = None
        self.slack = 0  # one batch's largest estimate
        self.posts: dict[str, list[Post]] = {}
        self.ready = False
        self.drained = False
        self.seen = Seen()

    # --- setup and runs --------------------------------------------------------------------

    @initialize(
        honour=st.booleans(),
        max_attempts=st.integers(1, 3),
        max_requeues=st.integers(1, 3),
        sizes=st.tuples(st.integers(2, 6), st.integers(1, 4)),
        too_long=st.booleans(),
        budget_batches=st.none() | st.integers(1, 5),
    )
    def setup(
        self,
        honour: bool,
        max_attempts: int,
        max_requeues: int,
        sizes: tuple[int, int],
        too_long: bool,
        budget_batches: int | None,
    ) -> None:
        self.honour = honour
        self.upstream = ModelUpstream(honour_keys=honour)
        self.max_attempts = max_attempts
        self.limits = Limits(max_attempts=max_attempts, max_requeues=max_requeues)
        for month, size in zip(MONTHS, sizes, strict=True):
            posts = [
                Post(id=f"{month}-p{i}", text=f"post {i} of {month}" + " more" * i, line=i + 1)
                for i in range(size)
            ]
            if too_long and month == MONTHS[0]:
                posts.append(Post(id=f"{month}-long", text="x" * (MAX_CHARS + 1), line=size + 1))
            self.posts[month] = posts
        sendable = [p.text for m in MONTHS for p in self.posts[m] if len(p.text) <= MAX_CHARS]
        texts = sorted(sendable, key=len)[-MAX_POSTS:]
        self.slack = estimate(PRICE, PROMPT, texts)
        if budget_batches is not None:
            self.max_cost = budget_batches * self.slack
        for month in MONTHS:
            run = self.new_run(month)
            run.ledger.sync_posts(month, self.posts[month], model=MODEL, prompt=PROMPT)
        self.ready = True

    def new_run(self, month: str) -> Run:
        """A new run of the month with a new claim. The run it replaces died: its process's
        memory (the claims it held) is gone, and its claim is taken over as a dead
        process's is. (One Ledger object per example: every new engine compiles every
        statement again, which would cost most of the test's time.)"""
        old = self.runs.get(month)
        if old is not None:
            self.ledger.leases._active.discard((month, old.holder))
            self.stale_holders[month].append(old.holder)
        run = Run(month, f"run-{uuid.uuid4().hex[:8]}", self.ledger)
        self.ledger.leases.claim(month, run.holder)
        self.runs[month] = run
        return run

    def flying(self, phase: Phase | None = None) -> list[InFlight]:
        return [f for f in self.in_flight if phase is None or f.phase is phase]

    def pick(self, phase: Phase, pick: int) -> InFlight:
        candidates = self.flying(phase)
        return candidates[pick % len(candidates)]

    def has(self, phase: Phase) -> bool:
        return any(f.phase is phase for f in self.in_flight)

    def level(self) -> BreakerLevel:
        return self.observer.approvals.breaker(UPSTREAM).level

    # --- rules: planning and starting ------------------------------------------------------

    @precondition(lambda self: bool(self.seen.plannable))
    @rule(which=WHICH, later=st.booleans())
    @step
    def plan(self, which: int, later: bool) -> None:
        self.plan_month(choose(self.seen.plannable, which), later)

    def plan_month(self, month: str, later: bool) -> None:
        ledger = self.runs[month].ledger
        ledger.release_due(month, now=utcnow() + LATER if later else None)
        ledger.plan(month, max_posts=MAX_POSTS, max_chars=MAX_CHARS, max_attempts=self.max_attempts)

    def may_start(self, month: str) -> bool:
        run = self.runs[month]
        flying = sum(f.run is run for f in self.in_flight)
        return not (run.stopped or run.budget_held) and flying < 2

    def startable(self) -> set[str]:
        return {m for m in self.seen.queued | self.seen.plannable if self.may_start(m)}

    @precondition(lambda self: self.ready and bool(self.startable()))
    @rule(which=WHICH, pick=PICK)
    @step
    def start(self, which: int, pick: int) -> None:
        """`tasks/batch.py`'s first step: the intent to pay, committed before any call (R3).
        A run that stopped (R14), waits for a budget answer, or has two batches in flight
        (its window) starts nothing."""
        month = choose(self.startable(), which)
        run = self.runs[month]
        queued = run.ledger.runnable_batches(month, now=utcnow() + LATER)
        if not queued:
            self.plan_month(month, later=True)
            queued = run.ledger.runnable_batches(month, now=utcnow() + LATER)
        if queued:
            self.mark(run, queued[pick % len(queued)])

    def mark(self, run: Run, batch: BatchRecord) -> InFlight | None:
        level = self.level()
        before = self.footprint(batch.batch_id)
        try:
            marked, posts = run.ledger.mark_running(
                batch.batch_id,
                UPSTREAM,
                idempotent=self.honour,
                price=PRICE,
                prompt=PROMPT,
                max_cost=self.max_cost,
                holder=run.holder,
                max_attempts=self.max_attempts,
            )
        except BreakerHeld:
            STATS[f"held by the breaker ({level})"] += 1
            assert level is not BreakerLevel.NORMAL, "held by a normal breaker"
            assert self.footprint(batch.batch_id) == before, "a held batch changed the ledger"
            return None
        except BudgetHeld:
            STATS["held by the budget"] += 1
            assert self.max_cost is not None
            assert self.footprint(batch.batch_id) == before, "a held batch changed the ledger"
            run.budget_held = True
            return None
        # Invariant 5: nothing starts while the breaker is open without a person's yes.
        assert level is not BreakerLevel.OPEN, f"{batch.batch_id} started with the breaker open"
        request = [(pid, text) for pid, text in marked.request or []]
        flight = InFlight(
            marked.batch_id, run, Phase.MARKED, posts, marked.sends, request, marked.idempotency_key
        )
        self.in_flight.append(flight)
        return flight

    def footprint(self, batch_id: str) -> tuple[Any, ...]:
        """What a held start must leave as it was: the batch, its posts' attempts, the spend."""
        batch = self.observer.batch(batch_id)
        return (
            batch.status,
            batch.sends,
            batch.charge,
            tuple((p.post_id, p.status, p.attempts) for p in self.observer.posts_of(batch_id)),
            len(self.observer.spend(batch.month)),
        )

    def stale_run_starts(self, month: str) -> None:
        """A run that lost its month (another took it over) never starts a batch."""
        run = self.runs[month]
        queued = run.ledger.batches(month, BatchStatus.QUEUED)
        if not queued or not self.stale_holders[month]:
            return
        before = self.footprint(queued[0].batch_id)
        with pytest.raises(MonthLost):
            run.ledger.mark_running(
                queued[0].batch_id,
                UPSTREAM,
                idempotent=self.honour,
                holder=self.stale_holders[month][-1],
                max_attempts=self.max_attempts,
            )
        assert self.footprint(queued[0].batch_id) == before
        STATS["a stale run could not start a batch"] += 1

    # --- rules: the create ------------------------------------------------------------------

    def check_intent(self, flight: InFlight) -> None:
        """Invariant 2: a create reaches the upstream only for a batch that is `running` in
        the ledger, with its posts `running` and its possible charge on the books (R3)."""
        batch = self.observer.batch(flight.batch_id)
        assert batch.status is BatchStatus.RUNNING, f"create for {batch.batch_id} {batch.status}"
        assert batch.sends == flight.send, (batch.batch_id, batch.sends, flight.send)
        posts = {p.post_id: p for p in self.observer.posts_of(flight.batch_id)}
        for post_id, _ in flight.request:
            assert post_id in posts and posts[post_id].status is PostStatus.RUNNING, (
                f"create for {batch.batch_id}: post {post_id} is not running in it"
            )
        rows = [
            r
            for r in self.observer.spend(batch.month)
            if r.batch_id == batch.batch_id and r.state is SpendState.POSSIBLE
        ]
        assert rows, f"create for {batch.batch_id} with no possible charge on the books"

    @precondition(lambda self: self.has(Phase.MARKED))
    @rule(pick=PICK, crash=CRASH, ends=st.none() | st.sampled_from(TaskOutcome))
    @step
    def create_succeeds(self, pick: int, crash: bool, ends: TaskOutcome | None) -> None:
        """The upstream answers with a task id, saved at once (R23) — unless the run dies
        between the answer and the save (`crash`): a task made, paid, and never recorded.
        `ends`: the first poll finds the task ended so (else it is polled in a later step)."""
        flight = self.pick(Phase.MARKED, pick)
        self.check_intent(flight)
        task, _ = self.upstream.create(flight.batch_id, flight.key, flight.send, flight.request)
        if crash:
            STATS["crash between the create and its task id"] += 1
            self.in_flight.remove(flight)
            return
        flight.run.ledger.record_task_id(flight.batch_id, task.task_id)
        flight.task_id, flight.phase = task.task_id, Phase.RECORDED
        if ends is not None:
            self.poll(flight, ends)
            if flight.phase is Phase.OUTPUT:
                self.finish(flight)

    @precondition(lambda self: self.has(Phase.MARKED))
    @rule(
        pick=PICK,
        fault=st.sampled_from(CreateFault),
        charged=st.booleans(),
        retry_after=st.sampled_from([0.0, 5.0, 86400.0]),
    )
    @step
    def create_fails(
        self, pick: int, fault: CreateFault, charged: bool, retry_after: float
    ) -> None:
        flight = self.pick(Phase.MARKED, pick)
        if fault is CreateFault.AMBIGUOUS:
            self.check_intent(flight)
            if charged:  # it arrived, was made and charged; the answer was lost
                self.upstream.create(flight.batch_id, flight.key, flight.send, flight.request)
        elif fault is not CreateFault.NOT_SENT:
            self.check_intent(flight)
            self.upstream.refused()
        failure = create_failure(fault, honour_keys=self.honour, retry_after=retry_after)
        self.fail(flight, failure)

    def fail(self, flight: InFlight, failure: Failure) -> None:
        """`tasks/batch.py` on an upstream error: the policy decides, the ledger applies."""
        ledger = flight.run.ledger
        decision = after_failure(
            ledger.batch(flight.batch_id),
            flight.posts,
            failure,
            idempotent=self.honour,
            limits=self.limits,
            now=utcnow(),
        )
        ledger.apply(flight.batch_id, decision, upstream=UPSTREAM)
        STATS[f"failure {failure.kind} -> batch {decision.batch_to}"] += 1
        if decision.stop_run:
            flight.run.stopped = decision.stop_run
        self.in_flight.remove(flight)

    # --- rules: the poll and the output ------------------------------------------------------

    @precondition(lambda self: self.has(Phase.RECORDED))
    @rule(pick=PICK, outcome=st.sampled_from(TaskOutcome), crash=CRASH)
    @step
    def poll_ends(self, pick: int, outcome: TaskOutcome, crash: bool) -> None:
        """The task ended upstream (if it had not already: a task's end is decided once). An
        output is saved, then checked and applied — unless the run dies in between (`crash`:
        the next run finishes it from the saved output, R21)."""
        flight = self.pick(Phase.RECORDED, pick)
        self.poll(flight, outcome)
        if flight.phase is Phase.OUTPUT:
            if crash:
                STATS["crash between the saved output and its check"] += 1
                self.in_flight.remove(flight)
            else:
                self.finish(flight)

    def poll(self, flight: InFlight, outcome: TaskOutcome) -> None:
        assert flight.task_id is not None
        task = self.upstream.tasks[flight.task_id]
        if task.forgotten:
            self.fail_with(flight, unknown_task_error(task.task_id))
            return
        if task.outcome is None:
            task.outcome = outcome
        if task.outcome is TaskOutcome.FAILED:
            self.fail_with(flight, failed_task_error(task.task_id))
            return
        self.save(flight, task)

    def save(self, flight: InFlight, task: ModelTask) -> None:
        flight.run.ledger.save_output(flight.batch_id, output_of(task), usage_of(task), PRICE)
        flight.phase = Phase.OUTPUT

    def fail_with(self, flight: InFlight, error: UpstreamError) -> None:
        self.fail(flight, failure_of(error))

    @precondition(lambda self: self.has(Phase.RECORDED))
    @rule(pick=PICK)
    @step
    def poll_task_unknown(self, pick: int) -> None:
        """The upstream lost the task (R26)."""
        flight = self.pick(Phase.RECORDED, pick)
        assert flight.task_id is not None
        task = self.upstream.tasks[flight.task_id]
        if task.outcome is None:
            self.upstream.forget(task.task_id)
        self.poll(flight, TaskOutcome.GOOD)

    @precondition(lambda self: self.has(Phase.RECORDED))
    @rule(pick=PICK, fault=st.sampled_from(PollFault), retries=st.integers(0, 2))
    @step
    def poll_gives_up(self, pick: int, fault: PollFault, retries: int) -> None:
        """Request retries spent while polling (R10, R16), then a final failure: the task may
        still deliver, so nothing is final (Decision.uncertain)."""
        flight = self.pick(Phase.RECORDED, pick)
        for _ in range(retries):
            flight.run.ledger.count_request_retry(flight.batch_id)
        self.fail_with(flight, poll_error(fault))

    def finish(self, flight: InFlight) -> None:
        decision = finish_from_output(flight.run.ledger, flight.batch_id, self.limits, UPSTREAM)
        STATS["output: split in halves" if decision.halves else "output: checked"] += 1
        if decision.stop_run:
            flight.run.stopped = decision.stop_run
        self.in_flight.remove(flight)

    # --- rules: crashes, restarts, people ----------------------------------------------------

    @precondition(lambda self: bool(self.in_flight))
    @rule(pick=PICK)
    @step
    def crash(self, pick: int) -> None:
        """The batch's lane dies between two steps: its ledger rows stay as they are."""
        del self.in_flight[pick % len(self.in_flight)]

    def restartable(self) -> set[str]:
        """Months with batches a dead run left, or whose run stopped (R14: a person fixed it)."""
        return self.seen.interrupted | {m for m, run in self.runs.items() if run.stopped}

    @precondition(lambda self: bool(self.restartable()))
    @rule(which=WHICH, poll=st.booleans(), resubmit=st.booleans(), asked=st.booleans())
    @step
    def restart(self, which: int, poll: bool, resubmit: bool, asked: bool) -> None:
        """The month's run dies (everything in flight is abandoned) and a new one starts, as
        `flows/monthly.py` does: saved outputs finished locally (R21), interrupted batches
        polled (R23) or resubmitted (R24) only with a person's yes (`asked`), else left (R22).
        The dead run, had it lived on, could start nothing."""
        month = choose(self.restartable(), which)
        self.in_flight = [f for f in self.in_flight if f.month != month]
        self.recover(self.new_run(month), poll=poll, resubmit=resubmit, asked=asked)
        self.stale_run_starts(month)

    def recover(self, run: Run, *, poll: bool, resubmit: bool, asked: bool) -> None:
        month, ledger = run.month, run.ledger
        ledger.sync_posts(month, self.posts[month], model=MODEL, prompt=PROMPT)
        ledger.close_emptied(month)
        finish_saved_outputs(ledger, month, self.limits)
        assert not ledger.batches(month, BatchStatus.RECEIVED), "R21: a saved output left"
        with ledger.plain() as reader:
            batches = interrupted_batches(reader, month)
        plan = plan_recovery(
            batches,
            idempotent=self.honour,
            price=PRICE,
            prompt=PROMPT,
        )
        records = ledger.batches(month, BatchStatus.RUNNING, BatchStatus.RECEIVED)
        assert [b.batch_id for b in records] == [b.batch_id for b in batches]
        by_id = {b.batch_id: b for b in records}
        for step_ in plan.of(RecoveryAction.POLL) + plan.of(RecoveryAction.RESUBMIT):
            has_id = by_id[step_.batch_id].upstream_task_id is not None
            assert (step_.action is RecoveryAction.POLL) is has_id, step_
        before = {b.batch_id: (b.status, b.sends) for b in batches}
        if plan.needs_yes and asked:
            answer = ledger.approvals.answer_recovery(
                month,
                UPSTREAM,
                poll=poll,
                resubmit=resubmit,
                note="",
                by="the money model",
                batch_ids=[s.batch_id for s in plan.steps],
            )
            assert answer.id is not None
            ledger.approvals.mark_used(answer.id)
            for step_ in plan.of(RecoveryAction.POLL) if poll else []:
                STATS["recovery: polled with a yes"] += 1
                batch = by_id[step_.batch_id]
                assert batch.upstream_task_id is not None
                self.in_flight.append(
                    InFlight(
                        batch.batch_id,
                        run,
                        Phase.RECORDED,
                        ledger.posts_of(batch.batch_id),
                        batch.sends,
                        [(pid, text) for pid, text in batch.request or []],
                        batch.idempotency_key,
                        task_id=batch.upstream_task_id,
                        resume=True,
                    )
                )
            for step_ in plan.of(RecoveryAction.RESUBMIT) if resubmit else []:
                STATS["recovery: resubmitted with a yes"] += 1
                ledger.resend_later(
                    step_.batch_id, "resubmission confirmed", max_attempts=self.max_attempts
                )
        else:  # R22: no yes, nothing of them is touched
            after = {b.batch_id: (b.status, b.sends) for b in ledger.batches(month)}
            assert all(after[k] == v for k, v in before.items()), (before, after)
        ledger.replan_unsent(month)

    @precondition(lambda self: self.seen.level is BreakerLevel.OPEN)
    @rule(month=MONTH, go_on=st.booleans())
    @step
    def answer_breaker(self, month: str, go_on: bool) -> None:
        """A person answers the open breaker's question (R19); either month may ask it."""
        approvals = self.runs[month].ledger.approvals
        approvals.ask(
            month, UPSTREAM, "the breaker is open", flow_run_id=None, prefect_api_url=None
        )
        answer = Answer.CONTINUE if go_on else Answer.STOP
        breaker = approvals.answer(month, UPSTREAM, answer, note="", by="the money model")
        assert breaker.level is (BreakerLevel.PROBE if go_on else BreakerLevel.OPEN)

    @precondition(lambda self: any(run.budget_held for run in self.runs.values()))
    @rule(month=MONTH, go_on=st.booleans())
    @step
    def answer_budget(self, month: str, go_on: bool) -> None:
        run = self.runs[month]
        if not run.budget_held:
            return
        approvals = run.ledger.approvals
        question = approvals.ask(
            month,
            UPSTREAM,
            "the next batch would cross the budget",
            flow_run_id=None,
            prefect_api_url=None,
            kind=Question.BUDGET,
        )
        assert question.id is not None
        approvals.close(
            question.id, Answer.CONTINUE if go_on else Answer.STOP, note="", by="the money model"
        )
        run.budget_held = False
        if not go_on:  # as the dispatch loop does: not sent, back to pending, uncharged
            run.ledger.replan_unsent(month)
            run.stopped = "the budget would be crossed and a person said stop"

    @precondition(lambda self: bool(self.seen.retryable))
    @rule(which=WHICH)
    @step
    def retry_failed(self, which: int) -> None:
        """A person's `postledger retry`: failed posts get their full attempts again (R15)."""
        month = choose(self.seen.retryable, which)
        self.runs[month].ledger.retry_failed(month)

    def idle(self) -> bool:
        """Nothing left to do but look: the example's work is done (more comes at its end)."""
        seen = self.seen
        busy = seen.plannable or self.startable() or self.restartable() or seen.retryable
        held = seen.level is BreakerLevel.OPEN or any(r.budget_held for r in self.runs.values())
        return self.ready and not (busy or self.in_flight or held)

    @precondition(lambda self: self.idle())
    @rule(month=MONTH)
    @step
    def look_at_progress(self, month: str) -> None:
        """Progress is read from the records and never calls the AI (R28, R30)."""
        creates, charges = self.upstream.creates, len(self.upstream.charges)
        counts = self.observer.counts(month)
        assert sum(counts.values()) == len(self.posts[month])
        assert (self.upstream.creates, len(self.upstream.charges)) == (creates, charges)

    # --- the invariants ----------------------------------------------------------------------

    @invariant()
    def money_invariants(self) -> None:
        if not self.ready:
            return
        was_dirty, self.dirty = self.dirty, True
        self.check_money()
        self.dirty = was_dirty

    def check_money(self) -> None:
        with Session(self.observer.engine) as session:  # one look at the whole ledger
            posts = list(session.exec(select(PostRecord)))
            batches = list(session.exec(select(BatchRecord)))
            spend = list(session.exec(select(SpendRecord)))
            kept = list(session.exec(select(PostCountRecord)))
            breaker = session.get(BreakerRecord, UPSTREAM) or BreakerRecord(upstream=UPSTREAM)
            history = list(
                session.exec(
                    select(BreakerEventRecord).where(BreakerEventRecord.upstream == UPSTREAM)
                )
            )
            budget_yes = {
                a.month
                for a in session.exec(
                    select(ApprovalRecord).where(
                        ApprovalRecord.kind == Question.BUDGET,
                        ApprovalRecord.answer == Answer.CONTINUE,
                    )
                )
            }
        # What status and the progress bar show: the counts kept as posts move are theirs.
        counted = Counter((p.month, p.status) for p in posts)
        assert {(k.month, k.status): k.posts for k in kept if k.posts} == counted, (
            f"kept counts {sorted((k.month, k.status, k.posts) for k in kept)}, "
            f"posts {sorted(counted.items())}"
        )
        flying = {f.batch_id for f in self.in_flight}
        self.seen = Seen(
            plannable={
                p.month for p in posts if p.status in (PostStatus.PENDING, PostStatus.WAITING)
            },
            queued={b.month for b in batches if b.status is BatchStatus.QUEUED},
            interrupted={
                b.month
                for b in batches
                if b.status in (BatchStatus.RUNNING, BatchStatus.RECEIVED)
                and b.batch_id not in flying
            },
            retryable={
                p.month
                for p in posts
                if p.status is PostStatus.FAILED and p.failure_kind is not FailureKind.TOO_LONG
            },
            level=breaker.level,
        )
        charged = self.upstream.charges_per_post()

        # 1. Paid attempts within the cap; no post charged more often than its attempts.
        for post in posts:
            cap = self.max_attempts + post.extra_attempts
            assert post.attempts <= cap, f"{post.post_id}: {post.attempts} attempts, cap {cap}"
            assert charged.get(post.post_id, 0) <= post.attempts, (
                f"invariant 1: {post.post_id} charged {charged[post.post_id]}x upstream with "
                f"{post.attempts} attempts in the ledger"
            )
            if post.status is PostStatus.COMPLETED:
                assert post.result is not None, f"R29: {post.post_id} completed with no result"
            if post.status is PostStatus.FAILED:
                assert post.failure_kind is not None, f"{post.post_id} failed with no kind"

        # 3. A task that was made is final only with its output, or the upstream's word.
        for batch in batches:
            if batch.upstream_task_id and batch.raw_output is None and batch.status in FINAL:
                assert batch.failure_kind in (
                    FailureKind.UPSTREAM_FAILED,
                    FailureKind.TASK_UNKNOWN,
                ), (
                    f"invariant 3: {batch.batch_id} {batch.status} ({batch.failure_kind}) with "
                    f"task {batch.upstream_task_id} and no output"
                )

        # 4. At most one split per lineage.
        splits: dict[str, set[str]] = {}
        for batch in batches:
            if batch.split_from is not None:
                for post_id in batch.post_ids:
                    splits.setdefault(post_id, set()).add(batch.split_from)
        for post in posts:
            events = splits.get(post.post_id, set())
            assert len(events) <= 1, f"invariant 4: {post.post_id} split by {sorted(events)}"
            assert post.split is bool(events), (post.post_id, post.split, events)

        # 5. The breaker: in probe one live batch at a time, none started since it opened,
        # and it leaves open only on a person's yes.
        live = {month: run.holder for month, run in self.runs.items()}
        since = [
            b
            for b in batches
            if b.status is BatchStatus.RUNNING
            and b.upstream == UPSTREAM
            and b.sent_by == live.get(b.month)
            and b.started_at is not None
            and b.started_at >= breaker.changed_at
        ]
        allowed = {BreakerLevel.NORMAL: len(since), BreakerLevel.PROBE: 1, BreakerLevel.OPEN: 0}
        assert len(since) <= allowed[breaker.level], (
            f"invariant 5: breaker {breaker.level}, running since it changed: "
            f"{[b.batch_id for b in since]}"
        )
        for event in history:
            if event.from_level is BreakerLevel.OPEN and event.to_level is not BreakerLevel.OPEN:
                assert "a person said continue" in event.why, event

        # 6. The spend rows agree with the upstream's charge log.
        rows_of: dict[str, list[Any]] = {}
        for row in spend:
            rows_of.setdefault(row.batch_id, []).append(row)
        charges_of: dict[str, int] = {}
        for charge in self.upstream.charges:
            charges_of[charge.batch_id] = charges_of.get(charge.batch_id, 0) + 1
            covering = [r for r in rows_of.get(charge.batch_id, []) if r.send <= charge.send]
            assert covering, f"invariant 6: {charge} has no spend row"
            row = max(covering, key=lambda r: (r.send, r.id or 0))
            assert row.state is not SpendState.REFUNDED, (
                f"invariant 6: {charge.batch_id} send {charge.send} was charged upstream, but "
                f"its spend row (send {row.send}) is refunded"
            )
        for batch_id, rows in rows_of.items():
            kept = [r for r in rows if r.state is not SpendState.REFUNDED]
            assert charges_of.get(batch_id, 0) <= len(kept), (
                f"invariant 6: {batch_id} charged {charges_of[batch_id]}x upstream, "
                f"{len(kept)} spend rows not refunded"
            )
            paid = [r for r in rows if r.state in (SpendState.CONFIRMED, SpendState.WASTED)]
            if paid:
                assert charges_of.get(batch_id, 0) >= 1, (
                    f"invariant 6: {batch_id} has paid spend rows and no upstream charge"
                )
            confirmed = [r for r in rows if r.state is SpendState.CONFIRMED]
            assert len(confirmed) <= charges_of.get(batch_id, 0), (batch_id, confirmed)

        # 8. The totals the database sums (the progress artifact's, status's) are the rows'.
        for month in MONTHS:
            summary = spend_summary([r for r in spend if r.month == month])
            assert self.observer.spend_totals(month) == summary, (
                f"invariant 8: {month}'s summed spend differs from its rows'"
            )

        # 7. The budget is never crossed without a person's yes.
        if self.max_cost is not None:
            for month in MONTHS:
                summary = spend_summary([r for r in spend if r.month == month])
                total = summary["confirmed"] + summary["possible"] + summary["wasted"]
                assert month in budget_yes or total <= self.max_cost + self.slack, (
                    f"invariant 7: {month} committed {total} of a budget of {self.max_cost} "
                    "with no yes"
                )

    # --- the end: no more faults -------------------------------------------------------------

    def teardown(self) -> None:
        # Not on top of a failure, nor for an example Hypothesis gave up on (it is called in
        # the `finally` of the example: an exception on its way out is visible here).
        failing = sys.exc_info()[0] is not None
        try:
            if self.ready and not self.dirty and not failing and not self.drained:
                self.drained = True
                self.run_to_the_end()
        finally:
            self.stack.close()

    def run_to_the_end(self) -> None:
        """Invariant 8: once faults stop, a new run of each month (with a yes to every
        question) ends every post `completed`, or `failed` with a kind."""
        self.in_flight.clear()
        for month in MONTHS:
            run = self.new_run(month)
            if self.level() is BreakerLevel.OPEN:
                run.ledger.approvals.answer(month, UPSTREAM, Answer.CONTINUE, note="", by="end")
            if self.max_cost is not None:
                asked = run.ledger.approvals.ask(
                    month, UPSTREAM, "budget", flow_run_id=None, prefect_api_url=None,
                    kind=Question.BUDGET,
                )  # fmt: skip
                assert asked.id is not None
                run.ledger.approvals.close(asked.id, Answer.CONTINUE, note="", by="end")
        for _ in range(40):
            for month in MONTHS:
                self.round_without_faults(self.runs[month])
            self.check_money()
            unfinished = [
                p
                for month in MONTHS
                for p in self.observer.posts(month)
                if p.status not in (PostStatus.COMPLETED, PostStatus.FAILED)
            ]
            if not unfinished:
                break
        else:
            raise AssertionError(f"invariant 8: the month never ended: {unfinished}")
        for month in MONTHS:
            for post in self.observer.posts(month):
                if post.status is PostStatus.FAILED:
                    assert post.failure_kind is not None, f"invariant 8: {post.post_id}"
            left = [b.batch_id for b in self.observer.batches(month) if b.status not in FINAL]
            assert not left, f"invariant 8: batches left unfinished: {left}"
        self.tally()

    def tally(self) -> None:
        """What this example got through, for the bench's summary."""
        STATS["examples run to the end"] += 1
        STATS[f"examples with honour_keys={self.honour}"] += 1
        levels = {e.to_level for e in self.observer.approvals.history(UPSTREAM, limit=1000)}
        for level in levels:
            STATS[f"examples whose breaker went {level}"] += 1
        for month in MONTHS:
            for post in self.observer.posts(month):
                STATS[f"posts ended {post.status}"] += 1
                if post.failure_kind is not None:
                    STATS[f"posts failed {post.failure_kind}"] += 1
        charged = self.upstream.charges_per_post()
        STATS["posts charged more than once (each with a paid attempt)"] += sum(
            n > 1 for n in charged.values()
        )
        if self.max_cost is not None:
            STATS["examples with a budget"] += 1

    def round_without_faults(self, run: Run) -> None:
        month, ledger = run.month, run.ledger
        if ledger.batches(month, BatchStatus.RUNNING, BatchStatus.RECEIVED):
            self.recover(run, poll=True, resubmit=True, asked=True)
        for flight in list(self.in_flight):  # the polls a person said yes to
            self.see_through(flight)
        ledger.release_due(month, now=utcnow() + LATER)
        ledger.plan(month, max_posts=MAX_POSTS, max_chars=MAX_CHARS, max_attempts=self.max_attempts)
        for batch in ledger.runnable_batches(month, now=utcnow() + LATER):
            started = self.mark(run, batch)
            assert started is not None, f"{batch.batch_id} held with no fault left"
            self.check_intent(started)
            task, _ = self.upstream.create(
                started.batch_id, started.key, started.send, started.request
            )
            started.task_id = task.task_id
            ledger.record_task_id(started.batch_id, task.task_id)
            started.phase = Phase.RECORDED
            self.see_through(started)

    def see_through(self, flight: InFlight) -> None:
        self.poll(flight, TaskOutcome.GOOD)
        if flight.phase is Phase.OUTPUT:
            self.finish(flight)


def machine_settings() -> settings:
    bench = examples()
    return settings(
        # ~1 s an example on SQLite (a fresh ledger, 30 steps, the run to the end); a
        # PostgreSQL database per example costs more.
        max_examples=bench or (10 if LEDGER_ON_POSTGRES else 20),
        stateful_step_count=int(os.environ.get("POSTLEDGER_TEST_MODEL_STEPS", "30")),
        deadline=None,
        database=None,  # nothing left in the work tree; a failure prints its steps
        derandomize=not bench,  # the suite explores the same examples every run
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        print_blob=True,
    )


def test_money_rules_hold_under_random_faults(ledger_url: str) -> None:
    """`ledger_url` puts this test in the PostgreSQL pass too; each example makes its own."""
    run_state_machine_as_test(MoneyModel, settings=machine_settings())
