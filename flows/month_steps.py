"""The named steps of a month's run (`flows/monthly.py` tells them in order): each one a few
calls to the core's public surface, and what the run says of it in its log."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact

from flows import due_work
from flows.approval import ask_about_budget
from flows.artifacts import MonthArtifacts, artifact_key
from flows.dispatch import RunStopped, run_until_done
from flows.limits import ensure_tag_limit
from flows.local_server import LOCAL_SERVER_FLAG
from flows.recover import Recovered
from flows.slots import free_stale_slots
from postledger.errors import PostledgerError
from postledger.ledger import Answer, BatchStatus, Ledger, LedgerUnavailable, Question
from postledger.preflight import CheckedPosts, finish_saved_outputs, import_spills, read_posts
from postledger.progress import (
    SIMULATED,
    forecast_markdown,
    ledger_forecast,
    money,
    over_budget,
    status_of,
)
from postledger.settings import MAX_IN_FLIGHT, Settings


@dataclass(frozen=True)
class MonthRun:
    """This run's hold on one month: what every step of it needs."""

    ledger: Ledger
    ledger_url: str
    month: str
    settings: Settings
    holder: str  # this run's claim on the month, checked as each batch starts
    # The run that held the month before and ended without giving it back (it crashed).
    taken_over_from: str | None = None


@contextmanager
def stops_if_the_ledger_fails(run: MonthRun, what_was_done: str) -> Iterator[None]:
    """A ledger that cannot be written ends the run with what was (not) done, in words."""
    try:
        yield
    except LedgerUnavailable as exc:
        raise RunStopped(f"{run.month}: {what_was_done}: {exc}") from None


@contextmanager
def artifacts_shown(run: MonthRun) -> Iterator[MonthArtifacts]:
    """The month's artifacts, shown at once, kept up while batches run, and finished."""
    artifacts = MonthArtifacts(run.ledger, run.month, run.settings)
    artifacts.update(force=True)
    try:
        yield artifacts
    finally:
        artifacts.finish()


def import_what_was_left(run: MonthRun) -> None:
    """What an earlier run paid for but could not write comes first (R20, R46). One file per
    month; the one file of earlier versions holds every month's."""
    for spill in import_spills(run.ledger, run.month, run.settings):
        if spill.taken:
            get_run_logger().warning(
                "imported %d records from %s, left by an earlier run", spill.taken, spill.path
            )
        if spill.kept_aside is not None:  # damaged lines: skipped, never deleted, said loudly
            get_run_logger().warning(spill.kept_aside.message())


def know_the_posts(run: MonthRun, posts: CheckedPosts, path: Path) -> None:
    """The ledger learns the month's posts: new, unchanged, or changed and so new work (R25).
    The checked file is read again as the ledger takes it, a chunk at a time: the month's
    posts are never held whole, nor handed to Prefect (no task takes them)."""
    logger = get_run_logger()
    settings = run.settings
    if posts.count >= due_work.LONG_STEP_POSTS:  # seconds of work: said before, not after
        logger.info("%s: writing %d posts of %s to the ledger", run.month, posts.count, path)
    analysis = settings.analysis_in_use()
    synced = run.ledger.sync_posts(
        run.month, read_posts(posts), model=settings.model, analysis=analysis
    )
    if closed := run.ledger.close_emptied(run.month):
        logger.info("closed %d sent batches whose posts all changed since", len(closed))
    logger.info(
        "%s: %d posts in %s, asked the analysis %r (%d new, %d unchanged, %d changed)",
        run.month,
        posts.count,
        path,
        analysis.name,
        synced.new,
        synced.unchanged,
        synced.changed,
    )


def finish_saved_outputs_first(run: MonthRun) -> None:
    """Safe work first: saved outputs are finished without calling the AI (R21)."""
    settings = run.settings
    finished = finish_saved_outputs(
        run.ledger, run.month, settings.analysis_in_use(), settings.limits()
    )
    if finished:
        get_run_logger().info("finished %d batches from their saved outputs", len(finished))


def forecast_the_month(run: MonthRun) -> str | None:
    """What is left is forecast before anything is sent (an artifact, and a line of the log);
    a forecast past the month's budget asks a person first, not halfway through. Why the
    month stops here, if it does."""
    month, settings = run.month, run.settings
    try:
        forecast = ledger_forecast(run.ledger_url, month, settings)
    except PostledgerError as exc:  # the budget is still checked as each batch starts
        get_run_logger().warning("%s: no forecast: %s", month, exc)
        return None
    create_markdown_artifact(
        forecast_markdown(forecast),
        key=artifact_key(month, "forecast"),
        description=f"postledger {month}: what is left should cost, and take",
    )
    total = None if forecast.cost is None else forecast.committed + forecast.cost
    run.ledger.keep_forecast(month, total, forecast.work.posts)  # for the bar and `status`
    cost = "no price" if forecast.cost is None else money(forecast.cost)
    get_run_logger().info(
        "%s: forecast: %d posts in %d batches left, about %s",
        month,
        forecast.work.posts,
        forecast.work.batches,
        cost,
    )
    if not forecast.cost or not forecast.crosses_budget() or _budget_approved(run.ledger, month):
        return None  # nothing left to pay for, within the budget, or already agreed to
    answer = ask_about_budget(
        run.ledger, month, settings, over_budget(forecast), before_sending=True
    )
    if answer is Answer.CONTINUE:
        return None
    said = "nobody answered in time" if answer is Answer.TIMED_OUT else "a person said stop"
    return f"{over_budget(forecast)}, and {said}"


def _budget_approved(ledger: Ledger, month: str) -> bool:
    """A person already said go on past the budget, for the rest of this month."""
    return any(
        approval.kind is Question.BUDGET and approval.answer is Answer.CONTINUE
        for approval in ledger.approvals.approvals(month)
    )


def make_room_for_batches(run: MonthRun) -> None:
    """The tag limit exists, and no slot is held by a run that is gone. Created at the default
    (a run's own `max_in_flight` is its window, not every run's ceiling), and never changed."""
    ensure_tag_limit(MAX_IN_FLIGHT)
    dead = _flow_run_id(run.taken_over_from)
    if os.environ.get(LOCAL_SERVER_FLAG) or dead is not None:
        # Our local server runs no lease reaper: slots of a killed run would stay taken, and
        # this run would wait for them forever. A full Prefect server reaps them itself, a
        # minute or so after the lease lapsed; the slots of the run this one took the month
        # over from (it crashed) are freed at once, on any server.
        dead_runs = [dead] if dead is not None else []
        for line in free_stale_slots(dead_flow_run_ids=dead_runs):
            get_run_logger().warning("%s", line)


def _flow_run_id(holder: str | None) -> UUID | None:
    """The flow run id a month claim's holder names (outside Prefect it is a random id)."""
    try:
        return UUID(holder) if holder else None
    except ValueError:
        return None


def run_batches(run: MonthRun, recovered: Recovered, artifacts: MonthArtifacts) -> str | None:
    """The month's batches within the window, until nothing is left to do; why it stopped
    early, if it did."""
    return run_until_done(
        run.ledger,
        run.month,
        run.ledger_url,
        run.settings,
        polls=recovered.polls,
        resends=recovered.resends,
        on_progress=artifacts.update,
        holder=run.holder,
    )


def say_what_is_uncertain(run: MonthRun) -> None:
    """Sent batches whose outcome is not known are never final: say so, with what to do."""
    month = run.month
    if uncertain := run.ledger.batch_ids(month, BatchStatus.RUNNING):
        get_run_logger().warning(
            "%s: %d batches were sent but their outcome is not known yet (%s). Nothing of "
            "them is lost or sent again by itself: `postledger plan --month %s` shows them; the "
            "next run polls those with a task id when given --poll, and sends the others again "
            "only with --resubmit (which may be charged twice)",
            month,
            len(uncertain),
            ", ".join(uncertain[:10]) + (" …" if len(uncertain) > 10 else ""),
            month,
        )


def say_how_it_ended(run: MonthRun, seconds: float) -> None:
    """One line at the end: what the month holds now, what it cost, how long this run took,
    what is left. The bundled simulator's spend is said to be simulated: nothing was paid."""
    report = status_of(run.ledger, run.month)
    if report is None:
        return
    spend = report["spend"]["shown"]
    simulated = SIMULATED if run.settings.simulated() else ""
    get_run_logger().info(
        "%s: %d completed, %d failed, %d left; spend confirmed %s, possible %s, wasted %s%s; "
        "this run took %.0f s",
        run.month,
        report["completed"],
        report["failed"],
        report["unfinished"],
        spend["confirmed"],
        spend["possible"],
        spend["wasted"],
        simulated,
        seconds,
    )


def month_summary(ledger: Ledger, month: str) -> dict[str, Any]:
    counts = ledger.counts(month)
    return {"month": month, "counts": {status.value: n for status, n in counts.items()}}
