"""The flow's dispatch loop: start runnable batches in order (R9), never more than the breaker's
window allows (R18), take them back in whatever order they finish, and plan what comes back
(retries, halves, posts whose wait is over) until nothing is queued or waiting.

The loop is in one phase at a time: sending (batches start while the window has room),
waiting for a probe (another run's probe batch holds the upstream), held by the budget (a
batch could cross it: drain, look again, then ask a person), or stopping (nothing more starts:
drain, then say why). With nothing in flight it either asks a person (a budget, an open
breaker), naps until the next post's wait is over, or ends. It starts only what may run now,
so no batch waits on the tag limit, and a pause never has a batch in flight nor a slot held.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from prefect import get_run_logger

from flows.approval import ask_about_budget, ask_to_continue
from flows.batch_runs import BatchRuns
from flows.due_work import plan_due_work, work_left
from flows.phases import Finished, HeldByBudget, Phase, Sending, Stopping, WaitingForProbe
from flows.stop_request import stop_asked
from flows.stops import breaker_stop, ledger_stop, said
from postledger.errors import PostledgerError
from postledger.ledger import Answer, BreakerLevel, Ledger, LedgerUnavailable, utcnow
from postledger.settings import Settings
from postledger.trip import (
    Crashed,
    Ended,
    HeldByBreaker,
    LedgerFailed,
    OverBudget,
    Settled,
    StopsRun,
    SubmissionEnded,
    carries_many,
    facts_of,
    new_submission_id,
    window,
)

# How long the loop naps at most between looks at the ledger while posts wait.
MAX_NAP_SECONDS = 5.0
# The shortest nap, and how often the loop looks whether a batch started under a budget has
# passed its budget check.
MIN_NAP_SECONDS = 0.05
# After the breaker held a batch back (another run is probing), look again this much later.
HELD_NAP_SECONDS = 1.0


class ShowProgress(Protocol):
    """Publishes the month's progress; `force`: even if it was published a moment ago."""

    def __call__(self, *, force: bool = False) -> None: ...


class RunStopped(PostledgerError):
    """No further batch may start in this run (R14, R19, R20); the message says what to do."""


def run_until_done(
    ledger: Ledger,
    month: str,
    ledger_url: str,
    settings: Settings,
    polls: list[str] | None = None,
    on_progress: ShowProgress | None = None,
    holder: str | None = None,
    resends: list[str] | None = None,
) -> str | None:
    """Returns why the run had to stop early, if it had to. `polls`: interrupted batches whose
    upstream task is to be polled (a person said yes, R23); `resends`: interrupted batches a
    submission carried, to be sent again by that submission (a person said yes, R24); they go
    first. `on_progress` is called whenever batches have ended, and at least every
    `progress_every` seconds while any is in flight. `holder`: this run's claim on the
    month."""
    with BatchRuns(settings, ledger_url, holder) as runs:
        dispatch = Dispatch(ledger, month, settings, runs, list(polls or []), on_progress)
        dispatch.to_resend = list(resends or [])
        return dispatch.run()


class Dispatch:
    def __init__(
        self,
        ledger: Ledger,
        month: str,
        settings: Settings,
        runs: BatchRuns,
        polls: list[str],
        on_progress: ShowProgress | None,
    ) -> None:
        self.ledger, self.month, self.settings, self.runs = ledger, month, settings, runs
        self.to_poll = polls
        self.to_resend: list[str] = []  # batches to send again in the submission that carried them
        # A Batch API: a slot is a submission, one upstream job carrying many batches.
        self.submitting = carries_many(settings)
        self.on_progress = on_progress
        self.upstream = settings.breaker_name()
        self.phase: Phase = Sending()
        self.crashed: set[str] = set()  # not started again in this run: it would break again
        self.progressed = False  # batches ended since the progress was last shown
        # While work is in flight the progress is shown again at least this often: a Batch
        # API job runs for hours with no batch ending, and its upstream's counts move.
        self.show_every = settings.progress_every
        self.next_show = time.monotonic() + self.show_every
        self.logger = get_run_logger()

    def run(self) -> str | None:
        while True:
            if (why := stop_asked()) is not None:
                self.stop(f"{why}. What is left waits for the next run of {self.month}")
            self.start_what_may_start()
            due = bool(self.runs.in_flight) and time.monotonic() >= self.next_show
            if (self.progressed or due) and self.on_progress is not None:
                # After the next batches are on their way, not before; when it is due, even
                # if it was shown a moment ago.
                self.on_progress(force=due)
                self.next_show = time.monotonic() + self.show_every
            self.progressed = False
            if self.runs.in_flight:
                self.take_back(self.runs.wait_ended(timeout=self.patience()))
                continue
            if (end := self.when_nothing_in_flight()) is not None:
                return end.why_stopped

    def start_what_may_start(self) -> None:
        phase = self.phase
        if isinstance(phase, WaitingForProbe) and time.monotonic() >= phase.until:
            self.phase = phase = Sending()
        if isinstance(phase, Sending) and phase.checking is not None:
            if self.ledger.still_queued({phase.checking}):
                return
            # Past its budget check: a later hold is a new one, worth its own second look.
            self.phase = phase = Sending()
        if not isinstance(phase, Sending):
            return
        room = window(self.breaker_level(), self.settings.max_in_flight) - len(self.runs.in_flight)
        if room <= 0:
            return
        if self.submitting:
            self.start_submissions(room, phase)
            return
        try:
            plan_due_work(self.ledger, self.month, self.settings)
            starts = [(batch_id, True) for batch_id in self.to_poll]
            busy = self.runs.busy() | self.crashed
            starts += [
                (batch_id, False)
                for batch_id in self.ledger.next_to_start(self.month, room, skip=busy)
            ]
        except LedgerUnavailable as exc:
            self.stop(ledger_stop(exc, self.runs.busy(), self.settings, self.month))
            return
        for batch_id, resume in starts:
            if room <= 0:
                break
            if batch_id in self.runs.in_flight or batch_id in self.crashed:
                continue
            self.runs.start(batch_id, resume=resume)
            if resume:
                self.to_poll.remove(batch_id)
            elif self.settings.max_cost is not None:
                self.phase = replace(phase, checking=batch_id)
                break
            room -= 1

    def start_submissions(self, room: int, phase: Sending) -> None:
        """Interrupted jobs first (each polled as the submission it was), then the due batches
        in start order, as many as one job carries, per free slot."""
        try:
            plan_due_work(self.ledger, self.month, self.settings)
            while room > 0 and self.to_poll:
                self.resume_next_job()
                room -= 1
            while room > 0 and self.to_resend:
                self.resend_next_submission()
                room -= 1
            most = facts_of(self.settings).most_batches_per_job
            while room > 0:
                busy = self.runs.busy() | self.crashed
                batch_ids = self.ledger.next_to_start(self.month, most, skip=busy)
                if not batch_ids:
                    return
                self.runs.start_submission(new_submission_id(self.month), batch_ids)
                room -= 1
                if self.settings.max_cost is not None:
                    # Under a budget, one submission marks its batches at a time, as single
                    # batches start one at a time: the next starts once this one's last batch
                    # has passed its budget check, so none overtakes a batch held back (R9).
                    self.phase = replace(phase, checking=batch_ids[-1])
                    return
        except LedgerUnavailable as exc:
            self.stop(ledger_stop(exc, self.runs.busy(), self.settings, self.month))

    def resume_next_job(self) -> None:
        """The next interrupted batch to poll, with every other one sent in the same job."""
        first = self.ledger.batch(self.to_poll[0])
        if first.submission_id is None or first.upstream_task_id is None:
            # Sent alone, before submissions carried many: polled alone.
            self.runs.start(self.to_poll.pop(0), resume=True)
            return
        same_job = [
            batch_id
            for batch_id in self.to_poll
            if (batch := self.ledger.batch(batch_id)).upstream_task_id == first.upstream_task_id
            and batch.submission_id == first.submission_id
        ]
        self.to_poll = [batch_id for batch_id in self.to_poll if batch_id not in same_job]
        self.runs.start_submission(first.submission_id, same_job, job_id=first.upstream_task_id)

    def resend_next_submission(self) -> None:
        """The next submission a person said may be sent again, with every batch of it that
        was said yes to: sent again under its same key, after a look for its job."""
        submission_id = self.ledger.batch(self.to_resend[0]).submission_id
        assert submission_id is not None
        same = [b for b in self.to_resend if self.ledger.batch(b).submission_id == submission_id]
        self.to_resend = [b for b in self.to_resend if b not in same]
        self.runs.start_submission(submission_id, same, resend=True)

    def patience(self) -> float:
        """How long to wait for the next end before looking at the ledger again."""
        checking = isinstance(self.phase, Sending) and self.phase.checking is not None
        wait = MIN_NAP_SECONDS if checking else MAX_NAP_SECONDS
        if self.on_progress is not None:  # and no later than the progress is due again
            wait = min(wait, max(self.next_show - time.monotonic(), MIN_NAP_SECONDS))
        return wait

    def take_back(self, ended: list[Ended]) -> None:
        for end in ended:
            if isinstance(end, SubmissionEnded):
                for outcome in end.outcomes:
                    self.take(outcome)
                if end.not_started is not None:
                    self.take(end.not_started)
                phase = self.phase
                if isinstance(phase, Sending) and phase.checking in end.batch_ids:
                    self.phase = replace(phase, checking=None)
                continue
            self.take(end)
            phase = self.phase
            if isinstance(phase, Sending) and phase.checking == end.batch_id:
                self.phase = replace(phase, checking=None)
        self.progressed = self.progressed or bool(ended)

    def take(self, end: Ended) -> None:
        phase = self.phase
        match end:
            case Crashed(batch_id, error):
                self.logger.error("batch %s crashed: %s", batch_id, error)
                self.crashed.add(batch_id)
            case HeldByBreaker():
                if isinstance(phase, Sending):
                    self.phase = WaitingForProbe(until=time.monotonic() + HELD_NAP_SECONDS)
            case OverBudget(why=why):
                if not isinstance(phase, HeldByBudget | Stopping):
                    again = isinstance(phase, Sending) and phase.budget_looked_again
                    self.phase = HeldByBudget(why, looked_again=again)
            case LedgerFailed(batch_id=batch_id):
                flying = {batch_id, *self.runs.busy()}
                self.stop(ledger_stop(end.error, flying, self.settings, self.month))
            case StopsRun(what_to_do=what_to_do):
                self.stop(what_to_do)
            case Settled():
                if isinstance(phase, Sending) and phase.budget_looked_again:
                    self.phase = replace(phase, budget_looked_again=False)

    def stop(self, why: str) -> None:
        if not isinstance(self.phase, Stopping):
            self.phase = Stopping(why)
            self.logger.error("no further batch will start in this run: %s", why)

    def when_nothing_in_flight(self) -> Finished | None:
        """Everything sent has come back: ask, nap, or end. None: go on sending."""
        match self.phase:
            case Stopping(why=why):
                return Finished(why)
            case HeldByBudget(looked_again=False):
                # Held while others were in flight, counted at their estimates: now that they
                # are settled at their real cost, look again before asking anyone.
                self.phase = Sending(budget_looked_again=True)
                return None
            case HeldByBudget(why=why):
                return self.ask(
                    lambda: ask_about_budget(
                        self.ledger, self.month, self.settings, why, self.show_question
                    ),
                    self.budget_stop,
                )
        if self.breaker_level() is BreakerLevel.OPEN and (
            self.to_poll or self.to_resend or work_left(self.ledger, self.month, self.crashed)
        ):
            # Everything sent has come back (R37): now a person decides (R19).
            return self.ask(
                lambda: ask_to_continue(self.ledger, self.month, self.settings, self.show_question),
                lambda answer: breaker_stop(self.upstream, self.month, answer),
            )
        wake = self.ledger.next_wake(self.month, skip=self.crashed)
        if wake is None and not self.to_poll and not self.to_resend:
            if self.crashed:  # not a clean end: say so, so the run is not marked a success
                return Finished(
                    f"batches {', '.join(sorted(self.crashed))} crashed (see the log); their "
                    "posts wait for the next run"
                )
            return Finished(None)
        self.nap(wake)
        return None

    def ask(
        self, question: Callable[[], Answer], stopped: Callable[[Answer], str]
    ) -> Finished | None:
        """Pause for a person (nothing in flight, no slot held); go on only on a continue."""
        try:
            answer = question()
            if answer is Answer.CONTINUE:
                self.phase = Sending()
                return None
            return Finished(stopped(answer))
        except LedgerUnavailable as exc:
            return Finished(ledger_stop(exc, set(), self.settings, self.month))

    def show_question(self) -> None:
        """The question is recorded: the progress shows it before the run pauses."""
        if self.on_progress is not None:
            self.on_progress(force=True)

    def budget_stop(self, answer: Answer) -> str:
        """No yes to cross the budget: what was not sent goes back to pending, uncharged."""
        self.ledger.replan_unsent(self.month)
        return f"the month's budget would be crossed and {said(answer)}."

    def nap(self, wake: datetime | None) -> None:
        """Wait for the next post's wait to be over, or for a probe's hold to pass."""
        seconds = (wake - utcnow()).total_seconds() if wake is not None else 0.0
        if isinstance(self.phase, WaitingForProbe):
            seconds = max(seconds, self.phase.until - time.monotonic())
        time.sleep(min(MAX_NAP_SECONDS, max(seconds, MIN_NAP_SECONDS)))

    def breaker_level(self) -> BreakerLevel:
        return self.ledger.approvals.breaker(self.upstream).level
