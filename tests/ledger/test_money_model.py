"""The money rules as a Hypothesis state machine, driving the REAL trip of a batch and of a
submission (`postledger.trip`) through the REAL adapters, over a model upstream at the wire
(`tests/support/model_upstream.py`, an `httpx.MockTransport`) that keeps its own charge log,
on the REAL ledger (a SQLite file per example; a fresh PostgreSQL database per example in the
suite's PostgreSQL pass). No Prefect: the trip's upstream calls go through `DirectPort`
(`tests/support/trip_port.py`), the same one-call functions Prefect's task runs make.

Its alphabet: trips of a batch (the task API, honouring keys or not) or of a submission of
many batches (OpenAI's Batch API, Anthropic's Message Batches), each request meeting what
the script says (every create fault; every read-side fault on every read: the poll, the
results download, the orphan search; a gateway that retried on its own), a crash, a ledger
write the database refuses, a spill that cannot be written, the month lost to another run
at any moment; jobs that end (or are lost) upstream; restarts with and without a person's
yes; breaker and budget questions answered; failed posts retried by a person.

After every step the money invariants hold (`check_money`); one of them is checked as each
charge is made: no post is paid again while a paid answer for it may still be read. At the
end of each example the months are run to their end without faults (invariant 8) and the
books must equal the upstream's bill.

POSTLEDGER_MODEL_EXAMPLES raises the number of examples (`bench/money_model.py`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx
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
from postledger.defaults import Price
from postledger.guards.charges import spend_summary
from postledger.guards.estimates import estimate
from postledger.guards.spill import Spill
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
    SubmissionRecord,
    utcnow,
)
from postledger.recovery.interrupted import adopt_orphans, finish_saved_outputs, import_spill
from postledger.recovery.steps import RecoveryAction, recovery_plan
from postledger.settings import BATCH_DISCOUNT_PERCENT, Settings, UpstreamKind
from postledger.trip import (
    BatchOutcome,
    HeldByBreaker,
    LedgerFailed,
    OverBudget,
    StopsRun,
    SubmissionEnded,
    Trip,
    new_submission_id,
    run_batch,
    run_submission,
)
from postledger.upstreams import Upstream, upstream_for
from tests.support.ledger_backend import LEDGER_ON_POSTGRES
from tests.support.model_upstream import (
    CREATE_WIRES,
    READ_WIRES,
    Charge,
    Crash,
    Kind,
    ModelUpstream,
    Outcome,
    Script,
    Wire,
)
from tests.support.money_model import (
    ANALYSIS,
    PROMPT,
    Mishaps,
    fresh_ledger_url,
    mishaps_in,
)
from tests.support.trip_port import DirectPort, FakeClock

MONTHS = ("2026-10", "2026-11")  # two months, one upstream: they share its breaker
UPSTREAM = "model-upstream"
MODEL = "model-1"
PRICE = Price(input=1_000_000, output=1_000_000)  # one micro-unit a token each way
MAX_POSTS, MAX_CHARS = 2, 120
JOB_LINES = 3  # a Batch API's submission carries up to three batches
FINAL = (BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.CANCELLED)
LATER = timedelta(hours=2)  # "time passes": every wait (at most max_wait) is over
BASE = {
    Kind.TASK_API: "http://model.test",
    Kind.OPENAI_BATCH: "http://model.test/v1",
    Kind.ANTHROPIC_BATCH: "http://model.test",
}
WHICH = st.integers(0, 1)  # which of the months a rule may act on
PICK = st.integers(0, 7)
CREATES = st.lists(st.sampled_from(sorted(CREATE_WIRES)), max_size=2)
READS = st.lists(st.sampled_from(sorted(READ_WIRES)), max_size=4)
ENDS = st.none() | st.lists(st.sampled_from(Outcome), min_size=1, max_size=3)
MOMENT = st.none() | st.integers(1, 14)
LOG = logging.getLogger("money-model")


@dataclass
class Run:
    """One run of a month: its claim, and what it learned it must not do any more."""

    month: str
    holder: str
    stopped: str | None = None  # no further batch may start in this run
    budget_held: bool = False
    dead: bool = False  # it crashed: only a new run goes on


@dataclass
class Seen:
    """What the last look at the ledger found: the rules' preconditions read it."""

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
T = TypeVar("T")


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
        # The trips' ledger (whose writes the mishaps reach), and the model's own look at it.
        self.ledger = Ledger(self.url)
        self.observer = Ledger(self.url)
        self.stack.callback(self.ledger.close)
        self.stack.callback(self.observer.close)
        folder = Path(tempfile.mkdtemp(prefix="postledger-money-spill-"))
        self.stack.callback(shutil.rmtree, folder, ignore_errors=True)
        self.good_spill = folder / "spill.jsonl"
        (folder / "unwritable").write_text("a file where the spill wants a folder\n")
        self.bad_spill = folder / "unwritable" / "spill.jsonl"
        self.clock = FakeClock()
        self.runs: dict[str, Run] = {}
        self.stale_holders: dict[str, list[str]] = {month: [] for month in MONTHS}
        self.kind = Kind.TASK_API
        self.honour = True
        self.settings = Settings()
        self.upstream: ModelUpstream | None = None
        self.max_cost: int | None = None
        self.posts: dict[str, list[Post]] = {}
        self.ready = False
        self.drained = False
        self.seen = Seen()

    # --- setup and runs --------------------------------------------------------------------

    @initialize(
        kind=st.sampled_from(Kind),
        honour=st.booleans(),
        max_attempts=st.integers(1, 3),
        max_requeues=st.integers(1, 3),
        sizes=st.tuples(st.integers(2, 6), st.integers(1, 4)),
        too_long=st.booleans(),
        budget_batches=st.none() | st.integers(1, 5),
    )
    def setup(
        self,
        kind: Kind,
        honour: bool,
        max_attempts: int,
        max_requeues: int,
        sizes: tuple[int, int],
        too_long: bool,
        budget_batches: int | None,
    ) -> None:
        self.kind = kind
        self.honour = honour and kind is Kind.TASK_API  # the Batch APIs honour no keys
        for month, size in zip(MONTHS, sizes, strict=True):
            posts = [
                Post(id=f"{month}-p{i}", text=f"post {i} of {month}" + " more" * i, line=i + 1)
                for i in range(size)
            ]
            if too_long and month == MONTHS[0]:
                posts.append(Post(id=f"{month}-long", text="x" * (MAX_CHARS + 1), line=size + 1))
            self.posts[month] = posts
        sendable = [p.text for m in MONTHS for p in self.posts[m] if len(p.text) <= MAX_CHARS]
        # What a batch costs on this kind: a Batch API's at its discount (`Settings.price`).
        discount = BATCH_DISCOUNT_PERCENT if UpstreamKind(kind.value).batch_api else 0
        self.price = PRICE.model_copy(update={"discount_percent": discount})
        biggest = estimate(
            self.price, ANALYSIS.request_text, sorted(sendable, key=len)[-MAX_POSTS:]
        )
        self.max_cost = budget_batches * biggest if budget_batches is not None else None
        self.settings = Settings(
            upstream_kind=UpstreamKind(kind.value),
            upstream_url=BASE[kind],
            upstream_name=UPSTREAM,
            upstream_idempotent=self.honour,
            model=MODEL,
            prompt=PROMPT,
            prices={MODEL: PRICE},
            max_cost=self.max_cost,
            max_batch_posts=MAX_POSTS,
            max_batch_chars=MAX_CHARS,
            max_submission_batches=JOB_LINES,
            max_attempts=max_attempts,
            max_requeues=max_requeues,
            request_retries=1,
            request_backoff=0.5,
            rate_limit_wait=1,
            rate_limit_max_wait=5,
            poll_interval=1,
            poll_wait=10,
            task_deadline=30,
            create_settle=1,
            spill_path=self.good_spill,
        )
        self.upstream = ModelUpstream(
            kind,
            honour_keys=self.honour,
            price=self.price,
            request_text=ANALYSIS.request_text,
            clock=self.clock,
            batch_of_key=self.batch_of_key,
            sends_of=lambda batch_id: self.observer.batch(batch_id).sends,
            # As the ledger's estimate is made: at the rates it has learned so far.
            estimate_of=lambda texts: self.observer.pricing(self.settings).estimate(texts),
        )
        self.upstream.before_charge = self.paid_again_while_readable
        for month in MONTHS:
            self.new_run(month)
            self.ledger.sync_posts(month, self.posts[month], model=MODEL, analysis=ANALYSIS)
        self.ready = True

    @property
    def model(self) -> ModelUpstream:
        assert self.upstream is not None
        return self.upstream

    def batch_of_key(self, key: str) -> tuple[str, int]:
        with Session(self.observer.engine) as session:
            batch = session.exec(select(BatchRecord).where(BatchRecord.idempotency_key == key))
            found = batch.one()
            return found.batch_id, found.sends

    def new_run(self, month: str) -> Run:
        """A new run of the month with a new claim. The run it replaces is gone (dead, or it
        lost the month): its claim is taken over as a dead process's is."""
        old = self.runs.get(month)
        if old is not None:
            self.observer.leases._active.discard((month, old.holder))
            self.stale_holders[month].append(old.holder)
        run = Run(month, f"run-{uuid.uuid4().hex[:8]}")
        self.observer.leases.claim(month, run.holder)
        self.runs[month] = run
        return run

    def client(self) -> Upstream:
        return upstream_for(self.settings, transport=httpx.MockTransport(self.model.handler))

    def trip_of(self, run: Run, *, spill_fails: bool = False) -> Trip:
        settings = self.settings
        if spill_fails:
            settings = settings.model_copy(update={"spill_path": self.bad_spill})
        port = DirectPort(settings, self.ledger, self.clock, holder=run.holder, client=self.client)
        return Trip(self.ledger, settings, port, LOG, holder=run.holder, clock=self.clock)

    def on_trip(
        self,
        run: Run,
        go: Callable[[Trip], Coroutine[Any, Any, T]],
        *,
        script: Script | None = None,
        ends: list[Outcome] | None = None,
        mishaps: Mishaps | None = None,
        spill_fails: bool = False,
    ) -> T | None:
        """One trip, to its end or to a crash (the run is then dead: only a new one goes on)."""
        model, mishaps = self.model, mishaps or Mishaps()
        model.script, model.ends_now = script or Script(), ends or []
        mishaps.take_over = lambda: self.lose_month(run)
        model.after_request = mishaps.after_request
        trip = self.trip_of(run, spill_fails=spill_fails)
        made_before = len(model.charges)
        try:
            with mishaps_in(self.ledger.engine, mishaps):
                return asyncio.run(go(trip))
        except Crash:
            STATS["a trip crashed"] += 1
            run.dead = True
            for batch in self.observer.batches(run.month, BatchStatus.RUNNING):
                model.unknowable.add(self.send_key(batch.batch_id, batch.sends))
            # A gateway's report of its own retries came with an answer the crash may have
            # lost before anything of it was written: those charges are beyond knowing.
            self.gateway_beyond_knowing(model.charges[made_before:])
            return None
        finally:
            model.script, model.ends_now, model.after_request = Script(), [], None
            self.uncertain_sends(run.month)
            if spill_fails:  # where neither the ledger nor the spill took it, only the log has
                self.gateway_beyond_knowing(model.charges[made_before:])

    def gateway_beyond_knowing(self, charges: list[Charge]) -> None:
        for charge in charges:
            if charge.by_gateway:
                self.model.gateway_unknown.add((charge.batch_id, charge.send))

    def uncertain_sends(self, month: str) -> None:
        """A batch left running with no task id kept is uncertain: the ledger cannot know
        whether its send made anything upstream, and keeps its possible charge."""
        for batch in self.observer.batches(month, BatchStatus.RUNNING):
            if batch.upstream_task_id is None:
                self.model.unknowable.add(self.send_key(batch.batch_id, batch.sends))

    def send_key(self, batch_id: str, send: int) -> tuple[str, int]:
        """A send as the upstream bills it: under a key it honours, every send of a batch is
        its first send's attempt again."""
        return batch_id, 1 if self.honour else send

    def lose_month(self, run: Run) -> None:
        """Another run takes the month over while this run's trip is out (its heartbeat was
        missed): the trip's writes from now on are fenced off."""
        if self.runs.get(run.month) is run:
            STATS["a run lost its month mid-trip"] += 1
            self.new_run(run.month)
            run.dead = True

    def take(self, run: Run, outcomes: list[BatchOutcome]) -> None:
        """What the outcomes tell the run: as the dispatch loop takes them."""
        for outcome in outcomes:
            STATS[f"outcome {type(outcome).__name__}"] += 1
            if isinstance(outcome, StopsRun | LedgerFailed):
                run.stopped = run.stopped or type(outcome).__name__
            elif isinstance(outcome, OverBudget):
                run.budget_held = True
            elif isinstance(outcome, HeldByBreaker):
                STATS["held by another run's probe"] += 1

    # --- rules: planning and trips -----------------------------------------------------------

    @precondition(lambda self: bool(self.seen.plannable))
    @rule(which=WHICH, later=st.booleans())
    @step
    def plan(self, which: int, later: bool) -> None:
        self.plan_month(choose(self.seen.plannable, which), later)

    def plan_month(self, month: str, later: bool) -> None:
        self.ledger.release_due(month, now=utcnow() + LATER if later else None)
        s = self.settings
        self.ledger.plan(
            month, max_posts=MAX_POSTS, max_chars=MAX_CHARS, max_attempts=s.max_attempts
        )

    def startable(self) -> set[str]:
        return {
            m
            for m in self.seen.queued | self.seen.plannable
            if not (self.runs[m].stopped or self.runs[m].budget_held or self.runs[m].dead)
        }

    @precondition(lambda self: self.ready and bool(self.startable()))
    @rule(
        which=WHICH,
        creates=CREATES,
        reads=READS,
        ends=ENDS,
        crash_at=MOMENT,
        ledger_fails_at=MOMENT,
        lease_lost_at=MOMENT,
        spill_fails=st.sampled_from([False, False, False, True]),
    )
    @step
    def trip(
        self,
        which: int,
        creates: list[Wire],
        reads: list[Wire],
        ends: list[Outcome] | None,
        crash_at: int | None,
        ledger_fails_at: int | None,
        lease_lost_at: int | None,
        spill_fails: bool,
    ) -> None:
        """The next due batch (a Batch API: up to three, one job) goes on its whole trip, its
        requests meeting the script; the job ends at once (`ends`) or stays running."""
        month = choose(self.startable(), which)
        run = self.runs[month]
        due = self.due(month)
        if not due:
            return
        mishaps = Mishaps(crash_at, ledger_fails_at, lease_lost_at)
        how = {
            "script": Script(list(creates), list(reads)),
            "ends": ends,
            "mishaps": mishaps,
            "spill_fails": spill_fails,
        }
        if self.kind is Kind.TASK_API:
            done = self.on_trip(run, sent(due[0]), **how)  # type: ignore[arg-type]
            self.take(run, [done] if done is not None else [])
        else:
            job = self.on_trip(run, submitted(month, due), **how)  # type: ignore[arg-type]
            self.take_ended(run, job)

    def due(self, month: str) -> list[str]:
        queued = self.observer.runnable_batches(month, now=utcnow() + LATER)
        if not queued:
            self.plan_month(month, later=True)
            queued = self.observer.runnable_batches(month, now=utcnow() + LATER)
        return [b.batch_id for b in queued]

    def take_ended(self, run: Run, ended: SubmissionEnded | None) -> None:
        if ended is None:
            return
        self.take(run, list(ended.outcomes))
        if ended.not_started is not None:
            self.take(run, [ended.not_started])

    # --- rules: the upstream's own doings ------------------------------------------------------

    @precondition(lambda self: self.upstream is not None and bool(self.model.running()))
    @rule(pick=PICK, outcomes=st.lists(st.sampled_from(Outcome), min_size=1, max_size=3))
    @step
    def job_ends(self, pick: int, outcomes: list[Outcome]) -> None:
        """A job still running upstream ends, each line as drawn: the next look reads it."""
        running = self.model.running()
        self.model.end(running[pick % len(running)], outcomes)

    @precondition(lambda self: self.upstream is not None and bool(self.model.jobs))
    @rule(pick=PICK, rarely=st.integers(0, 4))
    @step
    def job_lost(self, pick: int, rarely: int) -> None:
        """Now and then the upstream loses a job (its charges stay): the next look is told
        so (R26). (One draw in five: a rule with a job to act on is always there to pick.)"""
        jobs = [j for j in self.model.jobs.values() if not j.forgotten]
        if jobs and rarely == 0:
            self.model.forget(jobs[pick % len(jobs)])

    # --- rules: restarts, people ----------------------------------------------------------

    def restartable(self) -> set[str]:
        """Months whose run died or stopped, or that have batches no live trip handles."""
        return self.seen.interrupted | {
            m for m, run in self.runs.items() if run.stopped or run.dead
        }

    @precondition(lambda self: self.ready and bool(self.restartable()))
    @rule(
        which=WHICH,
        poll=st.booleans(),
        resubmit=st.booleans(),
        asked=st.booleans(),
        reads=READS,
        ends=ENDS,
    )
    @step
    def restart(
        self,
        which: int,
        poll: bool,
        resubmit: bool,
        asked: bool,
        reads: list[Wire],
        ends: list[Outcome] | None,
    ) -> None:
        """A new run of the month, as `flows/monthly.py` begins one: the spill imported,
        saved outputs finished (R21), orphans looked for (R49), interrupted batches polled
        (R23) or sent again (R24) only with a person's yes (`asked`), else left (R22)."""
        month = choose(self.restartable(), which)
        run = self.new_run(month)
        self.recover(run, poll=poll, resubmit=resubmit, asked=asked, reads=reads, ends=ends)
        self.stale_run_starts(month)

    def recover(
        self,
        run: Run,
        *,
        poll: bool,
        resubmit: bool,
        asked: bool,
        reads: list[Wire] | None = None,
        ends: list[Outcome] | None = None,
    ) -> None:
        month, ledger = run.month, self.ledger
        import_spill(ledger, Spill(self.settings.spill_file(month)), self.settings.price_book())
        ledger.sync_posts(month, self.posts[month], model=MODEL, analysis=ANALYSIS)
        ledger.close_emptied(month)
        finish_saved_outputs(ledger, month, ANALYSIS, self.settings.limits())
        assert not ledger.batches(month, BatchStatus.RECEIVED), "R21: a saved output left"
        unsearched: list[str] = []
        if self.kind is Kind.OPENAI_BATCH:
            self.model.script = Script([], list(reads or []))
            unsearched = asyncio.run(self.adopt(month)).unsearched
        with ledger.plain() as reader:
            plan = recovery_plan(reader, month, self.settings)
        before = {b.batch_id: (b.status, b.sends) for b in ledger.batches(month)}
        if not (plan.needs_yes and asked):
            after = {b.batch_id: (b.status, b.sends) for b in ledger.batches(month)}
            assert all(after[k] == v for k, v in before.items()), (before, after)  # R22
            ledger.replan_unsent(month)
            return
        answer = ledger.approvals.answer_recovery(
            month,
            UPSTREAM,
            poll=poll,
            resubmit=resubmit,
            note="",
            by="the money model",
            batch_ids=plan.asked_about,
            shown_seq=plan.as_of,
        )
        assert answer.id is not None
        ledger.approvals.mark_used(answer.id)
        if poll:
            self.poll_with_a_yes(
                run, [s.batch_id for s in plan.of(RecoveryAction.POLL)], reads, ends
            )
        if resubmit:
            resends = [
                s.batch_id
                for s in plan.of(RecoveryAction.RESUBMIT)
                if s.batch_id not in set(unsearched)
            ]
            self.resend_with_a_yes(run, resends, ends)
        ledger.replan_unsent(month)

    async def adopt(self, month: str) -> Any:
        port = DirectPort(self.settings, self.ledger, self.clock, client=self.client)
        return await adopt_orphans(self.ledger, month, port, clock=self.clock)

    def poll_with_a_yes(
        self, run: Run, batch_ids: list[str], reads: list[Wire] | None, ends: list[Outcome] | None
    ) -> None:
        """The batches whose task id is saved, followed again: never a new charge (R23)."""
        by_job: dict[tuple[str | None, str | None], list[str]] = {}
        for batch_id in batch_ids:
            batch = self.observer.batch(batch_id)
            by_job.setdefault((batch.submission_id, batch.upstream_task_id), []).append(batch_id)
        for (submission_id, job_id), ids in by_job.items():
            STATS["recovery: polled with a yes"] += len(ids)
            script = Script([], list(reads or []))
            if submission_id is None or job_id is None or self.kind is Kind.TASK_API:
                for batch_id in ids:
                    done = self.on_trip(run, resumed(batch_id), script=script, ends=ends)
                    self.take(run, [done] if done is not None else [])
            else:
                ended = self.on_trip(
                    run, followed(submission_id, job_id, ids), script=script, ends=ends
                )
                self.take_ended(run, ended)
            if run.dead:
                return

    def resend_with_a_yes(self, run: Run, batch_ids: list[str], ends: list[Outcome] | None) -> None:
        """The batches with no task id a person said may be sent again (R24): alone, back to
        the queue under their same key; a submission's, in that submission, after a look."""
        by_submission: dict[str, list[str]] = {}
        for batch_id in batch_ids:
            STATS["recovery: resubmitted with a yes"] += 1
            submission_id = self.observer.batch(batch_id).submission_id
            if submission_id is None:
                self.ledger.resend_later(
                    batch_id, "resubmission confirmed", max_attempts=self.settings.max_attempts
                )
            else:
                by_submission.setdefault(submission_id, []).append(batch_id)
        for submission_id, ids in by_submission.items():
            ended = self.on_trip(run, sent_again(submission_id, ids), ends=ends)
            self.take_ended(run, ended)
            if run.dead:
                return

    def stale_run_starts(self, month: str) -> None:
        """A run that lost its month (another took it over) never starts a batch."""
        queued = self.observer.batches(month, BatchStatus.QUEUED)
        if not queued or not self.stale_holders[month]:
            return
        stale = Run(month, self.stale_holders[month][-1])
        before = self.footprint(queued[0].batch_id)
        outcome = self.on_trip(stale, sent(queued[0].batch_id))
        assert isinstance(outcome, StopsRun), outcome
        assert self.footprint(queued[0].batch_id) == before
        STATS["a stale run could not start a batch"] += 1

    def footprint(self, batch_id: str) -> tuple[Any, ...]:
        batch = self.observer.batch(batch_id)
        return (
            batch.status,
            batch.sends,
            batch.charge,
            tuple((p.post_id, p.status, p.attempts) for p in self.observer.posts_of(batch_id)),
            len(self.observer.spend(batch.month)),
        )

    @precondition(lambda self: self.seen.level is BreakerLevel.OPEN)
    @rule(which=WHICH, go_on=st.booleans())
    @step
    def answer_breaker(self, which: int, go_on: bool) -> None:
        """A person answers the open breaker's question (R19); either month may ask it."""
        month = MONTHS[which]
        approvals = self.ledger.approvals
        approvals.ask(
            month, UPSTREAM, "the breaker is open", flow_run_id=None, prefect_api_url=None
        )
        answer = Answer.CONTINUE if go_on else Answer.STOP
        breaker = approvals.answer(month, UPSTREAM, answer, note="", by="the money model")
        assert breaker.level is (BreakerLevel.PROBE if go_on else BreakerLevel.OPEN)

    @precondition(lambda self: any(run.budget_held for run in self.runs.values()))
    @rule(which=WHICH, go_on=st.booleans())
    @step
    def answer_budget(self, which: int, go_on: bool) -> None:
        run = self.runs[MONTHS[which]]
        if not run.budget_held:
            return
        approvals = self.ledger.approvals
        question = approvals.ask(
            run.month,
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
            self.ledger.replan_unsent(run.month)
            run.stopped = "the budget would be crossed and a person said stop"

    @precondition(lambda self: bool(self.seen.retryable))
    @rule(which=WHICH)
    @step
    def retry_failed(self, which: int) -> None:
        """A person's `postledger retry`: failed posts get their full attempts again (R15)."""
        month = choose(self.seen.retryable, which)
        self.ledger.retry_failed(month)

    # --- invariant 9, as each charge is made ---------------------------------------------

    def paid_again_while_readable(self, charge: Charge) -> None:
        """Invariant 9: no post is paid again while a paid answer for it may still be read:
        every earlier charge of its posts (by one of postledger's own creates) has had its
        verdict delivered, or cannot be read by anyone (its job's id is known nowhere, and the
        upstream cannot be searched for it: only a person's yes sends such a batch again)."""
        if charge.by_gateway:
            return  # the gateway's own retry of the same request, not a payment we decided
        model = self.model
        for earlier in model.charges:
            if earlier.by_gateway or earlier.create_no == charge.create_no:
                continue
            if not set(earlier.post_ids) & set(charge.post_ids):
                continue
            job = model.jobs[earlier.job_id]
            if job.lines[earlier.batch_id].read or job.forgotten or not self.readable(job.job_id):
                continue
            if self.a_copy_was_read(earlier):
                continue
            raise AssertionError(
                f"invariant 9: {sorted(set(earlier.post_ids) & set(charge.post_ids))} paid "
                f"again for {charge.batch_id} while {earlier.job_id}'s answer for "
                f"{earlier.batch_id} may still be read. Charges: {model.charges}. "
                f"{self.history(earlier.batch_id)}"
            )

    def a_copy_was_read(self, charge: Charge) -> bool:
        """Whether the ledger read the verdict of a copy of the charge's job that a gateway
        made by retrying the same create: the copies carry the same metadata, and the one a
        search finds is as much the create's answer as the one the gateway answered with."""
        return any(
            self.model.jobs[c.job_id].lines[c.batch_id].read
            for c in self.model.charges
            if c.create_no == charge.create_no and c.batch_id == charge.batch_id
        )

    def readable(self, job_id: str) -> bool:
        """Whether we could read the job: it can be found in the listing (OpenAI's by its
        metadata, Anthropic's by the requests it carries), or its id is kept (in the ledger,
        or in the spill the next run imports)."""
        if self.kind in (Kind.OPENAI_BATCH, Kind.ANTHROPIC_BATCH):
            return True
        with Session(self.observer.engine) as session:
            if session.exec(
                select(BatchRecord.batch_id).where(BatchRecord.upstream_task_id == job_id)
            ).first():
                return True
            if session.exec(
                select(SubmissionRecord.submission_id).where(
                    SubmissionRecord.upstream_job_id == job_id
                )
            ).first():
                return True
        return any(
            record.get("task_id") == job_id
            for month in MONTHS
            for record in Spill(self.settings.spill_file(month)).records()
        )

    # --- the invariants, after every step --------------------------------------------------

    def spilled_gateway_retries(self) -> Counter[str]:
        """A gateway's retries the ledger could not take yet, by batch: in the spill, for the
        next run to import (they are on the books once it has)."""
        retries: Counter[str] = Counter()
        for month in MONTHS:
            for record in Spill(self.settings.spill_file(month)).records():
                # On its own, or with the task id of the create the gateway retried.
                if record["kind"] in ("gateway_retries", "task_id"):
                    retries[record["batch_id"]] += int(record.get("retries") or 0)
        return retries

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
        counted = Counter((p.month, p.status) for p in posts)
        assert {(k.month, k.status): k.posts for k in kept if k.posts} == counted, "kept counts"
        self.seen = Seen(
            plannable={
                p.month for p in posts if p.status in (PostStatus.PENDING, PostStatus.WAITING)
            },
            queued={b.month for b in batches if b.status is BatchStatus.QUEUED},
            interrupted={
                b.month for b in batches if b.status in (BatchStatus.RUNNING, BatchStatus.RECEIVED)
            },
            retryable={
                p.month
                for p in posts
                if p.status is PostStatus.FAILED and p.failure_kind is not FailureKind.TOO_LONG
            },
            level=breaker.level,
        )
        model = self.model
        ours = Counter(
            post_id
            for charge in model.charges
            if charge.billed and not charge.by_gateway
            for post_id in charge.post_ids
        )

        # 1. Paid attempts within the cap; no post charged by us more often than its attempts.
        for post in posts:
            cap = self.settings.max_attempts + post.extra_attempts
            assert post.attempts <= cap, f"{post.post_id}: {post.attempts} attempts, cap {cap}"
            assert ours.get(post.post_id, 0) <= post.attempts, (
                f"invariant 1: {post.post_id} charged {ours[post.post_id]}x with "
                f"{post.attempts} attempts in the ledger"
            )
            if post.status is PostStatus.COMPLETED:
                assert post.result is not None, f"R29: {post.post_id} completed with no result"
            if post.status is PostStatus.FAILED:
                assert post.failure_kind is not None, f"{post.post_id} failed with no kind"

        # 3. Paid work is final only with its output, or the upstream's word.
        for batch in batches:
            if batch.upstream_task_id and batch.raw_output is None and batch.status in FINAL:
                assert batch.failure_kind in (
                    FailureKind.UPSTREAM_FAILED,
                    FailureKind.TASK_UNKNOWN,
                    FailureKind.INPUT_CHANGED,
                ), f"invariant 3: {batch.batch_id} {batch.status} ({batch.failure_kind})"

        # 4. At most one split per lineage.
        splits: dict[str, set[str]] = {}
        for batch in batches:
            if batch.split_from is not None:
                for post_id in batch.post_ids:
                    splits.setdefault(post_id, set()).add(batch.split_from)
        for post in posts:
            lineage = splits.get(post.post_id, set())
            assert len(lineage) <= 1, f"invariant 4: {post.post_id} split by {sorted(lineage)}"
            assert post.split is bool(lineage), (post.post_id, post.split, lineage)

        # 5. The breaker: in probe one live batch at a time, none started since it opened,
        # and it leaves open only on a person's yes.
        live = {m: r.holder for m, r in self.runs.items() if not r.dead}
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
        assert len(since) <= allowed[breaker.level], f"invariant 5: {breaker.level}, {since}"
        for event in history:
            if event.from_level is BreakerLevel.OPEN and event.to_level is not BreakerLevel.OPEN:
                assert "a person said continue" in event.why, event

        # 6. Every charge the upstream billed is on the books, send by send: its own row, and
        # a row for each retry a gateway reported to us; none of them given back.
        rows_of: dict[tuple[str, int], list[SpendRecord]] = {}
        for row in spend:
            rows_of.setdefault(self.send_key(row.batch_id, row.send), []).append(row)
        billed_of: dict[tuple[str, int], list[Charge]] = {}
        for charge in model.charges:
            if charge.billed:
                billed_of.setdefault((charge.batch_id, charge.send), []).append(charge)
        spilled = self.spilled_gateway_retries()
        for send, charges in billed_of.items():
            kept_rows = [r for r in rows_of.get(send, []) if r.state is not SpendState.REFUNDED]
            # A gateway's retries are known once its report reached us, and kept unless the
            # process died before it could keep them (the send is then one it cannot know).
            reported = send not in model.unknowable and send not in model.gateway_unknown
            needed = sum(1 for c in charges if not c.by_gateway or (c.answered and reported))
            assert len(kept_rows) + spilled.get(send[0], 0) >= needed, (
                f"invariant 6: {send} billed {len(charges)}x, {len(kept_rows)} rows kept, "
                f"{spilled.get(send[0], 0)} spilled: {charges}. {self.history(send[0])}"
            )
        for send, rows in rows_of.items():
            paid = [r for r in rows if r.state in (SpendState.CONFIRMED, SpendState.WASTED)]
            costed = [r for r in paid if r.cost is not None]
            assert len(costed) <= len(billed_of.get(send, [])), (
                f"invariant 6: {send} has {len(costed)} rows at a cost the upstream never billed"
            )

        # 8. The totals the database sums (the progress artifact's, status's) are the rows'.
        for month in MONTHS:
            summary = spend_summary([r for r in spend if r.month == month])
            assert self.observer.spend_totals(month) == summary, f"invariant 8: {month}"

        # 7. The budget holds, with no slack: what postledger decided to spend (each send's own
        # row) never crosses it without a person's yes. A gateway's own retries are booked
        # after the fact, and stop new starts from then on.
        if self.max_cost is not None:
            for month in MONTHS:
                own = [min(rows, key=lambda r: r.id or 0) for rows in rows_of.values()]
                committed = sum(
                    r.cost if r.cost is not None else (r.estimated_cost or 0)
                    for r in own
                    if r.month == month and r.state is not SpendState.REFUNDED
                )
                assert month in budget_yes or committed <= self.max_cost, (
                    f"invariant 7: {month} committed {committed} of {self.max_cost} with no yes"
                )

    # --- the end: no more faults -------------------------------------------------------------

    def teardown(self) -> None:
        failing = sys.exc_info()[0] is not None
        try:
            if self.ready and not self.dirty and not failing and not self.drained:
                self.drained = True
                self.run_to_the_end()
        finally:
            self.stack.close()

    def run_to_the_end(self) -> None:
        """Invariant 8: once faults stop, a new run of each month (with a yes to every
        question) ends every post `completed`, or `failed` with a kind. Then the books equal
        the upstream's bill (invariant 10)."""
        model = self.model
        for job in model.running():
            model.end(job, [Outcome.GOOD])
        for month in MONTHS:
            self.new_run(month)
            if self.observer.approvals.breaker(UPSTREAM).level is BreakerLevel.OPEN:
                self.ledger.approvals.answer(month, UPSTREAM, Answer.CONTINUE, note="", by="end")
            if self.max_cost is not None:
                asked = self.ledger.approvals.ask(
                    month, UPSTREAM, "budget", flow_run_id=None, prefect_api_url=None,
                    kind=Question.BUDGET,
                )  # fmt: skip
                assert asked.id is not None
                self.ledger.approvals.close(asked.id, Answer.CONTINUE, note="", by="end")
        for _ in range(30):
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
            left = [b.batch_id for b in self.observer.batches(month) if b.status not in FINAL]
            assert not left, f"invariant 8: batches left unfinished: {left}"
        self.books_equal_the_bill()
        self.tally()

    def round_without_faults(self, run: Run) -> None:
        month = run.month
        if run.dead or run.stopped or run.budget_held:
            run = self.new_run(month)
        if self.observer.batches(month, BatchStatus.RUNNING, BatchStatus.RECEIVED):
            self.recover(run, poll=True, resubmit=True, asked=True, ends=[Outcome.GOOD])
        for _ in range(20):
            due = self.due(month)
            if not due or run.dead or run.stopped:
                return
            if self.kind is Kind.TASK_API:
                done = self.on_trip(run, sent(due[0]), ends=[Outcome.GOOD])
                self.take(run, [done] if done is not None else [])
            else:
                job = self.on_trip(run, submitted(month, due), ends=[Outcome.GOOD])
                self.take_ended(run, job)
            assert not run.budget_held, "held by the budget with a yes given"

    def books_equal_the_bill(self) -> None:
        """Invariant 10: spend confirmed + possible + wasted equals what the upstream billed,
        send by send: each billed charge at its cost where its usage reached us, else at the
        estimate the ledger holds for it. A send may hold more (possible, at its estimate)
        only where the ledger could not know whether the upstream made it: a create whose
        answer was lost or was a 5xx after the work could have been made, or a crash."""
        model = self.model
        billed: dict[tuple[str, int], list[Charge]] = {}
        for charge in model.charges:
            if charge.billed:
                billed.setdefault((charge.batch_id, charge.send), []).append(charge)
        with Session(self.observer.engine) as session:
            rows = [
                r for r in session.exec(select(SpendRecord)) if r.state is not SpendState.REFUNDED
            ]
        of_send: dict[tuple[str, int], list[SpendRecord]] = {}
        for row in rows:
            of_send.setdefault(self.send_key(row.batch_id, row.send), []).append(row)
        for send in set(billed) | set(of_send):
            charges, kept = list(billed.get(send, [])), of_send.get(send, [])
            if send in model.gateway_unknown and len(kept) < len(charges):
                unreported = [c for c in charges if c.by_gateway][: len(charges) - len(kept)]
                charges = [c for c in charges if c not in unreported]
                STATS["a gateway's retries lost with a crash before they were kept"] += 1
            owed = owed_for(charges, billed.get(send, []))
            booked = sum(r.cost if r.cost is not None else (r.estimated_cost or 0) for r in kept)
            extra = len(kept) - len(charges)
            assert extra >= 0, (
                f"invariant 10: {send} billed {len(charges)}x, booked {len(kept)}: rows {kept}, "
                f"charges {charges}. {self.history(send[0])}"
            )
            if extra:
                assert send in model.unknowable, (
                    f"invariant 10: {send} booked {len(kept)} charges, billed {len(charges)}, "
                    f"though its fate was known. {self.history(send[0])}"
                )
                uncosted = [r for r in kept if r.cost is None]
                assert len(uncosted) >= extra, f"invariant 10: {send}: {kept}"
                booked -= extra * (uncosted[0].estimated_cost or 0)
                STATS["sends the ledger could not know were made (kept possible)"] += extra
            if send in model.cost_unsure and booked != owed:
                owed = sum(c.estimate for c in charges)  # read, then lost before it was kept
                STATS["sends whose read usage was lost with its job (kept at the estimate)"] += 1
            assert booked == owed, (
                f"invariant 10: {send} booked {booked}, billed {owed}: rows {kept}, "
                f"charges {charges}. {self.history(send[0])}"
            )

    def history(self, batch_id: str) -> str:
        """The batch's events, for a failure's message: what the ledger was told, in order."""
        month = batch_id.split("-b")[0]
        lines = [
            f"  {e.seq} {e.from_status}->{e.to_status}: {e.why}"
            for e in self.observer.events(month)
            if e.entity_id == batch_id
        ]
        return f"{batch_id}'s events:\n" + "\n".join(lines)

    def tally(self) -> None:
        STATS["examples run to the end"] += 1
        STATS[f"examples on {self.kind}"] += 1
        for month in MONTHS:
            for post in self.observer.posts(month):
                STATS[f"posts ended {post.status}"] += 1
        charged = self.model.charges_per_post()
        STATS["posts charged more than once"] += sum(n > 1 for n in charged.values())
        if any(c.by_gateway for c in self.model.charges):
            STATS["examples with a gateway's own retries"] += 1


def owed_for(charges: list[Charge], billed: list[Charge]) -> int:
    """What a send's `charges` (of all it was `billed`, those on the books) come to: per
    create, the one answer whose usage reached us at its cost (a gateway's copy of the job,
    found by its metadata, is as good as the job it answered with; the ledger follows one of
    them), every other charge at its estimate."""
    owed = 0
    for create_no in {c.create_no for c in charges}:
        group = [c for c in charges if c.create_no == create_no]
        told = [c for c in billed if c.create_no == create_no and c.usage_told]
        owed += sum(c.estimate for c in group)
        if told:
            owed += told[0].cost - told[0].estimate
    return owed


# What a trip does, for `on_trip`: a batch sent (or followed again), a submission's job.


def sent(batch_id: str) -> Callable[[Trip], Coroutine[Any, Any, BatchOutcome]]:
    return lambda trip: run_batch(trip, batch_id)


def resumed(batch_id: str) -> Callable[[Trip], Coroutine[Any, Any, BatchOutcome]]:
    return lambda trip: run_batch(trip, batch_id, resume=True)


def submitted(month: str, due: list[str]) -> Callable[[Trip], Coroutine[Any, Any, SubmissionEnded]]:
    return lambda trip: run_submission(trip, new_submission_id(month), due[:JOB_LINES])


def followed(
    submission_id: str, job_id: str, batch_ids: list[str]
) -> Callable[[Trip], Coroutine[Any, Any, SubmissionEnded]]:
    return lambda trip: run_submission(trip, submission_id, batch_ids, job_id=job_id)


def sent_again(
    submission_id: str, batch_ids: list[str]
) -> Callable[[Trip], Coroutine[Any, Any, SubmissionEnded]]:
    return lambda trip: run_submission(trip, submission_id, batch_ids, resend=True)


def machine_settings() -> settings:
    bench = examples()
    return settings(
        # The suite's share is a fixed smoke run of the real trip (~4 s an example on a busy
        # machine); the search for new failures is bench/money_model.py's (2 000 examples).
        max_examples=bench or (5 if LEDGER_ON_POSTGRES else 12),
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
