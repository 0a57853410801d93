"""The flow's dispatch loop: start runnable batches in order (R9), never more than the breaker's
window allows (R18), take them back in whatever order they finish, and plan what comes back
(retries, halves, posts whose wait is over) until nothing is queued or waiting.

It starts only what may run now, so no lane waits on the tag limit, and a pause never has a
batch in flight (a pause does not stop task runs already submitted) nor a slot held: batches run
on lanes (`tasks/lanes.py`), which the loop releases whenever it has no next batch for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prefect import get_run_logger

from flows.approval import ask_about_budget, ask_to_continue
from postledger.guards.breaker import window
from postledger.ledger import Ledger
from postledger.record.db import LedgerUnavailable
from postledger.record.models import Answer, BreakerLevel, PostStatus, utcnow
from postledger.settings import Settings
from tasks.lanes import Lanes

# How long the loop sleeps at most between looks at the ledger while posts wait.
MAX_NAP_SECONDS = 5.0
# How often the loop looks whether a batch started under a budget has passed its check.
CONFIRM_NAP_SECONDS = 0.005
# After the breaker held a batch back (another month is probing), look again this much later.
HELD_NAP_SECONDS = 1.0


class RunStopped(RuntimeError):
    """No further batch may start in this run (R14, R19, R20); the message says what to do."""


def run_until_done(
    ledger: Ledger,
    month: str,
    ledger_url: str,
    settings: Settings,
    polls: list[str] | None = None,
    on_progress: Callable[[], None] | None = None,
    holder: str | None = None,
) -> str | None:
    """Returns why the run had to stop early, if it had to. `polls`: interrupted batches whose
    upstream task is to be polled (a person said yes, R23); they go first. `on_progress` is
    called whenever batches have ended. `holder`: this run's claim on the month."""
    with Lanes(ledger_url, holder) as lanes:
        return _dispatch(lanes, ledger, month, settings, polls or [], on_progress)


def _dispatch(
    lanes: Lanes,
    ledger: Ledger,
    month: str,
    settings: Settings,
    polls: list[str],
    on_progress: Callable[[], None] | None,
) -> str | None:
    logger = get_run_logger()
    upstream = settings.breaker_name()
    in_flight: set[str] = set()
    crashed: set[str] = set()  # not started again in this run: whatever broke would again
    stop: str | None = None
    quiet_until = 0.0  # monotonic time before which nothing new is submitted
    over_budget: str | None = None  # a batch was held back by the budget: ask once drained
    budget_rechecked = False
    progressed = False  # batches ended since the artifacts were last updated
    to_poll = list(polls)
    unconfirmed: set[str] = set()  # started under a budget, not yet past its budget check

    while True:
        level = ledger.approvals.breaker(upstream).level
        room = window(level, settings.max_in_flight) - len(in_flight)
        if unconfirmed:
            unconfirmed = ledger.still_queued(unconfirmed & in_flight)
        may_submit = (
            stop is None
            and over_budget is None
            and not unconfirmed
            and time.monotonic() >= quiet_until
        )
        if may_submit and room > 0:
            try:
                plan_due_work(ledger, month, settings)
            except LedgerUnavailable as exc:
                stop = ledger_stop(exc, set(in_flight), settings, month)
                logger.error("no further batch will start in this run: %s", stop)
            else:
                starts = [(batch_id, True) for batch_id in to_poll]
                starts += [(b.batch_id, False) for b in ledger.runnable_batches(month)]
                for batch_id, resume in starts:
                    if room <= 0:
                        break
                    if batch_id in in_flight or batch_id in crashed:
                        continue
                    lanes.start(batch_id, resume=resume)
                    in_flight.add(batch_id)
                    if settings.max_cost is not None and not resume:
                        # R9 under a budget: the next batch starts only once this one has
                        # passed its budget check, so that one held back is never overtaken
                        # by a later one that happens to fit.
                        unconfirmed.add(batch_id)
                        break
                    if resume:
                        to_poll.remove(batch_id)
                    room -= 1

        lanes.release_idle()  # no next batch for them: their slots go back at once
        if progressed and on_progress is not None:
            on_progress()  # after the next batches are on their way, not before
        progressed = False

        if not in_flight:
            if stop is not None:
                return stop
            if over_budget is not None and not budget_rechecked:
                # Held while others were in flight, counted at their estimates: now that they
                # are settled at their real cost, look again before asking anyone.
                over_budget, budget_rechecked = None, True
                continue
            if over_budget is not None:
                lanes.settle()  # a paused run holds no slot
                try:
                    answer = ask_about_budget(ledger, month, settings, over_budget)
                    over_budget, budget_rechecked = None, False
                    if answer is not Answer.CONTINUE:
                        ledger.replan_unsent(month)  # not sent: back to pending, uncharged
                        return f"the month's budget would be crossed and {said(answer)}."
                except LedgerUnavailable as exc:
                    return ledger_stop(exc, set(), settings, month)
                continue
            if level is BreakerLevel.OPEN and (to_poll or work_left(ledger, month, crashed)):
                # Everything sent has come back (R20): now a person decides (R19).
                lanes.settle()
                try:
                    answer = ask_to_continue(ledger, month, settings)
                except LedgerUnavailable as exc:
                    return ledger_stop(exc, set(), settings, month)
                if answer is not Answer.CONTINUE:
                    return breaker_stop(upstream, month, answer)
                continue
            wake = ledger.next_wake(month, skip=crashed)
            if wake is None and not to_poll:
                if crashed:  # not a clean end: say so, so the run is not marked a success
                    return (
                        f"batches {', '.join(sorted(crashed))} crashed (see the log); their "
                        "posts wait for the next run"
                    )
                return None
            wake = wake or utcnow()
            nap = max((wake - utcnow()).total_seconds(), quiet_until - time.monotonic(), 0.01)
            time.sleep(min(MAX_NAP_SECONDS, nap))
            continue

        # After a nap with nothing back, posts whose wait is over may be planned.
        ended = lanes.wait_ended(timeout=CONFIRM_NAP_SECONDS if unconfirmed else MAX_NAP_SECONDS)
        for end in ended:
            batch_id = end.batch_id
            in_flight.discard(batch_id)
            if end.outcome is None:  # R17: one broken batch must not stop the others
                error = end.error
                logger.error("batch %s crashed: %s: %s", batch_id, type(error).__name__, error)
                crashed.add(batch_id)
                continue
            outcome = end.outcome
            if outcome.held:
                quiet_until = time.monotonic() + HELD_NAP_SECONDS
            if outcome.over_budget and over_budget is None:
                over_budget = outcome.over_budget
            elif not outcome.over_budget and not outcome.held:
                budget_rechecked = False
            if outcome.ledger_failure and stop is None:
                stop = ledger_stop(outcome.ledger_failure, {batch_id, *in_flight}, settings, month)
                logger.error("no further batch will start in this run: %s", stop)
            if outcome.stop_run and stop is None:
                stop = outcome.stop_run
                logger.error("no further batch will start in this run: %s", stop)
        progressed = bool(ended)


def work_left(ledger: Ledger, month: str, skip: set[str]) -> bool:
    """Whether anything of the month may still be sent: pending, waiting or queued."""
    return ledger.has_posts(month, PostStatus.PENDING) or ledger.next_wake(month, skip) is not None


def plan_due_work(ledger: Ledger, month: str, settings: Settings) -> None:
    """Posts whose wait is over, and pending posts, into new batches (the writes happen only
    when there is something to write)."""
    if ledger.has_posts(month, PostStatus.WAITING):
        ledger.release_due(month)
    if ledger.has_posts(month, PostStatus.PENDING):
        plan = ledger.plan(
            month,
            max_posts=settings.max_batch_posts,
            max_chars=settings.max_batch_chars,
            max_attempts=settings.max_attempts,
        )
        if plan.too_long:
            get_run_logger().warning(
                "%d posts longer than max_batch_chars: not sent", plan.too_long
            )


def ledger_stop(
    error: LedgerUnavailable | str, in_flight: set[str], settings: Settings, month: str
) -> str:
    flying = ", ".join(sorted(in_flight)) or "none"
    return (
        f"a ledger write failed, so no new batch starts: {error}. Batches in flight then: "
        f"{flying}; they were awaited, and what they could not write is in "
        f"{settings.spill_file(month)}, which the next run imports first. Fix the database, "
        "then run again."
    )


def said(answer: Answer) -> str:
    return "a person said stop" if answer is Answer.STOP else "nobody answered in time"


def breaker_stop(upstream: str, month: str, answer: Answer) -> str:
    return (
        f"the circuit breaker of {upstream} is open and {said(answer)}. It stays open for "
        f"every run until a person continues: `postledger approve --month {month}`, then run "
        "again."
    )
