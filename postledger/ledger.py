"""The ledger: every post, batch and status change of every month, persisted.

A façade: each step is one write transaction that holds the month's lock (R5) and goes
through `postledger.record.states.Transitions`, so history and state can never disagree. What
a step does lives in its section; here it is only sequenced, and locked.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Engine
from sqlmodel import Session

from postledger.analysis import Analysis
from postledger.batches import planning, recovered, sending, submissions
from postledger.batches.intake import SyncReport, sync_posts
from postledger.batches.output import OutputCheck
from postledger.batches.planning import PlanReport
from postledger.batches.posts import Post
from postledger.defaults import SQLITE_BUSY_TIMEOUT, PriceBook
from postledger.failures import carry_out_many
from postledger.failures.carry_out import carry_out
from postledger.failures.policy import Decision
from postledger.guards import chunk_sends
from postledger.guards.approvals import Approvals
from postledger.guards.breaker import BreakerHeld
from postledger.guards.breaker_state import apply_signal, breaker_holds
from postledger.guards.charges import (
    NO_QUOTE,
    BudgetHeld,
    GatewayRetries,
    book_send,
    budget_holds,
    quote,
    settle,
)
from postledger.guards.chunk_sends import JobRoom
from postledger.guards.estimates import Pricing, learned_rates
from postledger.guards.spend import unpriced_budget
from postledger.record import batch_chunks, counts_seen
from postledger.record.analyses import keep_analysis
from postledger.record.collector import collector_paused
from postledger.record.db import (
    BREAKERS,
    LedgerUnavailable,
    WriteLocks,
    create_schema,
    make_engine,
    refresh_statistics,
)
from postledger.record.job_counts import JobCounts
from postledger.record.migrate import check_current, current_revision
from postledger.record.models import (
    Answer,
    ApprovalRecord,
    BatchRecord,
    BatchStatus,
    BreakerLevel,
    Charge,
    FailureKind,
    ForecastRecord,
    PostRecord,
    PostStatus,
    Question,
    SubmissionRecord,
    month_of,
    utcnow,
)
from postledger.record.month_lease import MonthBusy, MonthLeases, check_holds
from postledger.record.reads import LedgerError, LedgerReads, load_batches
from postledger.record.states import Transitions
from postledger.settings import Limits, Settings

# The façade, and what its callers name: the records' kinds, and the errors it raises.
__all__ = [
    "Answer",
    "ApprovalRecord",
    "BatchStatus",
    "BreakerHeld",
    "BreakerLevel",
    "BudgetHeld",
    "FailureKind",
    "Ledger",
    "LedgerUnavailable",
    "MonthBusy",
    "PlanReport",
    "PostStatus",
    "Question",
    "Started",
    "SyncReport",
    "open_ledger",
    "utcnow",
]


class Started(NamedTuple):
    """A batch marked running: it may be sent now. Its posts, as they were marked."""

    batch: BatchRecord
    posts: list[PostRecord]


_shared: dict[str, Ledger] = {}
_shared_guard = threading.Lock()


def open_ledger(url: str, *, busy_timeout: float = SQLITE_BUSY_TIMEOUT) -> Ledger:
    """The process's one Ledger for `url` (opened with the first caller's `busy_timeout`):
    engines are thread-safe and costly to make, and one set of month locks per process is what
    serializes its threads."""
    with _shared_guard:
        if url not in _shared:
            _shared[url] = Ledger(url, busy_timeout=busy_timeout)
        return _shared[url]


class Ledger(LedgerReads):
    def __init__(
        self, url: str, *, read_only: bool = False, busy_timeout: float = SQLITE_BUSY_TIMEOUT
    ) -> None:
        self.url = url
        self.engine: Engine = make_engine(url, read_only=read_only, busy_timeout=busy_timeout)
        if read_only:
            check_current(self.engine)
        else:
            create_schema(self.engine)
        self._locks = WriteLocks(self.engine)
        self.approvals = Approvals(self.engine, self._locks)  # breakers and people's answers
        self.leases = MonthLeases(self._locks)  # one run per month

    def close(self) -> None:
        self.engine.dispose()

    def schema_revision(self) -> str | None:
        """The Alembic revision the ledger's schema is at."""
        with self.engine.connect() as connection:
            return current_revision(connection)

    @contextmanager
    def _write(self, month: str) -> Iterator[tuple[Session, Transitions]]:
        with self._locks.session(month) as session:
            yield session, Transitions(session, month)

    @contextmanager
    def _fenced(self, month: str, holder: str | None) -> Iterator[tuple[Session, Transitions]]:
        """A write of the paid path: with `holder`, only while that run still holds the month
        (its claim is the write's fencing token, R34): a run that lost the month to another
        writes nothing more of it, and the run that holds it now is the only one to settle."""
        with self._write(month) as (session, moves):
            if holder is not None:
                check_holds(session, month, holder)
            yield session, moves

    # --- input and planning ----------------------------------------------------------------

    def sync_posts(
        self, month: str, posts: Iterable[Post], *, model: str, analysis: Analysis
    ) -> SyncReport:
        """Make the ledger know every post of the file and the analysis they are asked: new
        posts `pending`, unchanged ones as they were, changed ones (text, model or the
        analysis, R25) back to `pending`. `posts` is read a chunk at a time (a month's file,
        `read_posts`, is never held whole), all of it in one transaction: a file that turns
        out bad on the way (InputError) leaves the ledger as it was."""
        with collector_paused(), self._write(month) as (session, moves):
            keep_analysis(session, analysis)
            report = sync_posts(session, moves, month, posts, model=model, analysis=analysis)
        refresh_statistics(self.engine, report.new + report.changed)
        return report

    def replan_unsent(self, month: str) -> int:
        """Dissolve batches planned by an earlier run but never sent: they cost nothing, and
        their posts are planned again under the current limits. Returns the posts freed."""
        with collector_paused(), self._write(month) as (session, moves):
            return planning.replan_unsent(session, moves, month)

    def plan(
        self,
        month: str,
        *,
        max_posts: int,
        max_chars: int,
        max_attempts: int | None = None,
        keep_batches: bool = True,
    ) -> PlanReport:
        """Put every `pending` post into a new batch (R7); posts too long to send end `failed`,
        and so do posts with no paid attempt left under `max_attempts` (R15). The report
        lists the new batches unless `keep_batches` is false (a month's plan: only counted)."""
        with collector_paused(), self._write(month) as (session, moves):
            report = planning.plan_pending(
                session,
                moves,
                month,
                max_posts=max_posts,
                max_chars=max_chars,
                max_attempts=max_attempts,
                keep_batches=keep_batches,
            )
        refresh_statistics(self.engine, report.planned * max_posts)  # its posts moved, at most
        return report

    # --- one batch's life ------------------------------------------------------------------

    def mark_running(
        self,
        batch_id: str,
        upstream: str | None = None,
        *,
        idempotent: bool = True,
        pricing: Pricing | None = None,
        max_cost: int | None = None,
        holder: str | None = None,
        max_attempts: int | None = None,
    ) -> Started | BreakerHeld | BudgetHeld:
        """Persist the intent to pay before paying (R3): the batch and its posts `running`,
        each post's business attempt counted. Only after this returns `Started` may the AI be
        called. With `upstream`, its breaker is asked first, in the same transaction; with
        `max_cost`, the month's budget too: when either holds the batch (R18, R52), that is
        returned and nothing is changed. `pricing` quotes each new attempt's possible charge.

        A batch sent again with its same idempotency key is the same attempt when the upstream
        honours keys (it charges a key once); otherwise it is a new attempt.

        With `holder`, the run must still hold the month (`MonthLost` otherwise): a run that
        lost its claim to another never starts a batch. With `max_attempts`, a new attempt
        beyond a post's cap is refused (`LedgerError`): planning never asks for one."""
        _check_priced(pricing, max_cost)
        month = month_of(batch_id)
        with self._fenced(month, holder) as (session, moves):
            batch = self._batch(session, batch_id)
            if upstream is not None:
                self._locks.also(session, BREAKERS)
                if (breaker := breaker_holds(session, upstream, batch)) is not None:
                    return breaker
            # A new attempt, unless sent again under its key to an upstream that honours it (R35).
            first = batch.charge is Charge.NONE or not idempotent
            # Read once: the estimate's texts, and the posts the send starts.
            queued = sending.queued_posts(session, batch)
            quoted = (
                quote(pricing, batch_chunks.texts_to_send(batch, queued)) if first else NO_QUOTE
            )
            budget = budget_holds(session, month, quoted.estimated, max_cost) if first else None
            if budget is not None:
                return budget
            posts = sending.start(moves, batch, queued, upstream=upstream, holder=holder)
            if first and max_attempts is not None:
                batch_chunks.check_caps(batch, posts, max_attempts)
            book_send(session, batch, first=first, quoted=quoted)
            sending.count_attempts(moves, batch, posts, first=first)
        return Started(batch, posts)

    def record_task_id(
        self,
        batch_id: str,
        task_id: str,
        *,
        adopted: str | None = None,
        gateway: GatewayRetries | None = None,
        holder: str | None = None,
    ) -> None:
        """Save the upstream task id the moment it is known: recovery polls it (R23).

        `adopted`: the id was never saved by the run that made the task and was found
        upstream afterwards (why, and how); it is logged as an event of the batch, whose
        status stays as it is. `gateway`: the retries a gateway made of the same create, on
        the books in the same transaction (a crash cannot keep the id and lose them).
        `holder`: the run's claim on the month, the write's fence (`MonthLost`, and nothing
        written, when another run holds the month now)."""
        with self._fenced(month_of(batch_id), holder) as (session, moves):
            batch = self._batch(session, batch_id)
            sending.take_task_id(session, moves, batch, task_id, adopted)
            if gateway is not None:
                gateway.book(session, moves, batch)

    # --- a submission: one upstream job, many batches (Batch APIs) ---------------------------

    def mark_running_many(
        self,
        batch_ids: Sequence[str],
        upstream: str | None = None,
        *,
        idempotent: bool = True,
        pricing: Pricing | None = None,
        max_cost: int | None = None,
        holder: str | None = None,
        max_attempts: int | None = None,
        room: JobRoom | None = None,
    ) -> tuple[list[BatchRecord], BreakerHeld | BudgetHeld | None]:
        """`mark_running` for a chunk of one month's batches, in order, in one transaction:
        the same checks of the breaker and the budget before each, the same moves, events,
        counts and possible charges. Stops at the first that may not start (why is returned;
        it and those after it stay queued) or that the job has no `room` for. The posts are
        read by one query and moved by one executemany (`batch_chunks`)."""
        _check_priced(pricing, max_cost)
        with self._fenced(month_of(batch_ids[0]), holder) as (session, moves):
            if upstream is not None:
                self._locks.also(session, BREAKERS)
            return chunk_sends.mark(
                session,
                moves,
                batch_ids,
                upstream,
                idempotent=idempotent,
                pricing=pricing,
                max_cost=max_cost,
                holder=holder,
                max_attempts=max_attempts,
                room=room,
            )

    def record_submission(self, submission: SubmissionRecord, *, holder: str | None = None) -> None:
        """Persist a submission of batches already marked running, before its upstream job is
        made (R3): a crash anywhere after this leaves a record to find the job by."""
        with self._fenced(submission.month, holder) as (session, moves):
            # Read by one query and held: `record` then finds each batch in the session.
            unread = ("request", "post_ids", "raw_output")  # long, and not needed here
            _held = load_batches(session, submission.batch_ids, unread=unread)
            submissions.record(session, moves, submission)

    def record_job_id(
        self,
        submission_id: str,
        job_id: str,
        *,
        file_id: str | None = None,
        adopted: str | None = None,
        gateway: GatewayRetries | None = None,
        holder: str | None = None,
    ) -> list[str]:
        """Save the submission's upstream job id the moment it is known, on it and as the
        task id of each of its batches (R23). Returns the batches that took it. `gateway`: as
        for `record_task_id`, on every batch of the submission (a remade job remade each)."""
        month = self.submission(submission_id).month
        with self._fenced(month, holder) as (session, moves):
            found = session.get(SubmissionRecord, submission_id)
            assert found is not None  # submissions are never deleted
            unread = ("request", "raw_output")  # as in `record_submission`
            _held = load_batches(session, found.batch_ids, unread=unread)
            taken = submissions.take_job_id(session, moves, found, job_id, file_id, adopted)
            if gateway is not None:
                for batch_id in found.batch_ids:
                    gateway.book(session, moves, self._batch(session, batch_id))
            return taken

    def keep_job_counts(
        self,
        month: str,
        job_id: str,
        counts: JobCounts,
        *,
        seen_at: datetime | None = None,
        holder: str | None = None,
    ) -> bool:
        """The counts a running job's upstream last reported, on its submission, and when
        they were seen (default: now): only shown (`postledger status`, the progress), never
        decided from, so no event. One UPDATE, fenced by `holder` in its own WHERE: False
        when nothing was written (the job's id is not on a submission of the month, or
        another run holds the month now)."""
        with self._write(month) as (session, _):
            return counts_seen.keep_counts(
                session, month, job_id, counts, seen_at or utcnow(), holder
            )

    def save_output(
        self,
        batch_id: str,
        raw: str,
        usage: dict[str, Any] | None,
        prices: PriceBook | None = None,
        *,
        holder: str | None = None,
    ) -> None:
        """Persist the raw output before checking it (R4): a crash while validating loses
        nothing, and nobody pays for it again. The charge is settled from the usage, at the
        price of the model and kind it was sent to (`prices`; None: no price known)."""
        with self._fenced(month_of(batch_id), holder) as (session, moves):
            batch = self._batch(session, batch_id)
            why = "output saved, not yet validated"
            sending.receive(session, moves, batch, raw, usage, prices, why)

    def save_outputs(
        self,
        outputs: Sequence[tuple[str, str, dict[str, Any] | None]],
        prices: PriceBook | None = None,
        *,
        holder: str | None = None,
    ) -> None:
        """`save_output` for a chunk of one month's batches (batch id, raw output, usage) in
        one transaction: each output kept before anything of the chunk is checked (R4)."""
        with self._fenced(month_of(outputs[0][0]), holder) as (session, moves):
            chunk_sends.save(session, moves, outputs, prices)

    def finish_outputs(
        self,
        batch_ids: Sequence[str],
        analysis: Analysis,
        limits: Limits,
        upstream: str | None,
        *,
        holder: str | None = None,
    ) -> list[Decision]:
        """`finish_from_output` for a chunk of one month's received batches in one
        transaction: each saved output checked, decided by the same rules (R12, R13) and the
        decision carried out, told to `upstream`'s breaker. A batch whose every post has a
        valid item (the usual case) is completed by one executemany for the chunk; any other
        goes through `carry_out` on its posts, in the same transaction."""
        with self._fenced(month_of(batch_ids[0]), holder) as (session, moves):
            if upstream is not None:
                self._locks.also(session, BREAKERS)
            return carry_out_many.finish(session, moves, batch_ids, analysis, limits, upstream)

    def apply(
        self,
        batch_id: str,
        decision: Decision,
        check: OutputCheck | None = None,
        *,
        upstream: str | None = None,
        usage: dict[str, Any] | None = None,
        prices: PriceBook | None = None,
        holder: str | None = None,
    ) -> None:
        """Carry out a business decision (postledger.failures.policy) in one transaction: successes
        saved first (R13), the others retried, split, made to wait or ended with a reason;
        and what the outcome tells `upstream`'s breaker (R18). `usage`: what the upstream
        reported a failed answer used, booked as the batch's cost (R51)."""
        month = month_of(batch_id)
        with self._fenced(month, holder) as (session, moves):
            batch = self._batch(session, batch_id)
            if upstream is not None and decision.signal is not None:
                self._locks.also(session, BREAKERS)
                apply_signal(
                    session,
                    upstream,
                    decision.signal,
                    f"{batch_id}: {decision.why}",
                    month=month,
                    sent_at=batch.started_at,
                )
            if usage is not None:
                settle(session, batch_id, usage, prices)
            carry_out(session, moves, batch, decision, check)

    def count_gateway_retries(
        self,
        batch_id: str,
        retries: int,
        *,
        pricing: Pricing | None = None,
        holder: str | None = None,
    ) -> None:
        """A gateway between us and the upstream says it retried this batch's request on its
        own: each retry may have been charged, so each is on the books as a possible charge."""
        if retries <= 0:
            return
        with self._fenced(month_of(batch_id), holder) as (session, moves):
            batch = self._batch(session, batch_id)
            GatewayRetries(retries, pricing).book(session, moves, batch)

    def count_request_retry(self, batch_id: str, *, holder: str | None = None) -> None:
        """One more request-layer retry for this batch (R16: not a business attempt)."""
        with self._fenced(month_of(batch_id), holder) as (session, _):
            batch = self._batch(session, batch_id)
            batch.request_retries += 1
            session.add(batch)

    # --- recovery and people's decisions ---------------------------------------------------

    def import_spill(self, records: list[dict[str, Any]], prices: PriceBook | None = None) -> int:
        """Take in what batches spilled while the ledger could not be written (R20). Safe to
        repeat: a record is taken in once (by its id), and a fact the ledger already has is
        skipped. Returns the records taken in."""
        taken = 0
        for record in records:
            with self._write(month_of(record["batch_id"])) as (session, moves):
                taken += recovered.take_spilled(session, moves, record, prices)
        return taken

    def resend_later(
        self,
        batch_id: str,
        why: str,
        *,
        max_attempts: int | None = None,
        holder: str | None = None,
    ) -> None:
        """A person confirmed that an interrupted batch with no task id may be sent again
        (R24): back to `queued`, with its same idempotency key and request. A post that has
        had every paid attempt it may have gets one more: the person said yes to this one."""
        with self._fenced(month_of(batch_id), holder) as (session, moves):
            batch = self._batch(session, batch_id)
            recovered.resend_later(session, moves, batch, why, max_attempts)

    def close_emptied(self, month: str) -> list[str]:
        """Batches sent before whose posts all changed since (R25): nothing of them is reused
        and nothing is sent again under their key. Returns their ids."""
        with self._write(month) as (session, moves):
            return recovered.close_emptied(session, moves, month)

    def release_due(self, month: str, now: datetime | None = None) -> int:
        """Posts whose wait is over go back to `pending`, to be planned again (R11)."""
        now = now or utcnow()
        with self._write(month) as (session, moves):
            return planning.release_due(session, moves, month, now)

    def next_batch_estimate(self, month: str, pricing: Pricing) -> tuple[str, int] | None:
        """The next batch to send and what it is estimated to cost (micro-units), for a
        question that asks whether to go on; None when nothing is waiting."""
        next_ids = self.next_to_start(month, 1)
        if not next_ids:
            return None
        texts = [post.text for post in self.posts_of(next_ids[0])]
        estimated = pricing.estimate(texts)
        return None if estimated is None else (next_ids[0], estimated)

    def pricing(self, settings: Settings) -> Pricing:
        """What the configured model's sends are priced by, with the estimate's rates learned
        from its latest confirmed sends in this ledger (the assumed ones with none)."""
        with self.plain() as reader:
            return Pricing.of(settings, learned_rates(reader, settings.model))

    def keep_forecast(self, month: str, total: int | None, posts: int) -> None:
        """The month's forecast, as the run worked it out before sending: what the month
        should cost in all (None: no price), with `posts` left to send. The latest replaces
        the one before."""
        with self._write(month) as (session, _):
            session.merge(ForecastRecord(month=month, total=total, posts=posts))

    def retry_failed(self, month: str, kinds: set[FailureKind] | None = None) -> int:
        """A person's decision: failed posts (of these kinds) are planned again."""
        with self._write(month) as (session, moves):
            return planning.retry_failed(session, moves, month, kinds)


def _check_priced(pricing: Pricing | None, max_cost: int | None) -> None:
    """A budget needs a price to hold batches by: refused before anything is marked."""
    if max_cost is not None and (pricing is None or pricing.price is None):
        raise LedgerError(unpriced_budget("configured"))
