"""The monthly flow: read the month's posts, import what an earlier run left, make the ledger
know the posts, finish saved outputs, ask what needs a yes, run the month's batches within the
window (one `process-batch` task run each), and summarise.

Every decision is made from the ledger, so running this flow again for the same month picks up
where the last run stopped instead of starting over.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from blocks import settings_from_blocks
from flows import due_work
from flows.api_clients import lighter_task_run_clients
from flows.artifacts import MonthArtifacts
from flows.dispatch import RunStopped, run_until_done
from flows.limits import ensure_tag_limit
from flows.local_server import LOCAL_SERVER_FLAG
from flows.recover import Recovered, answer_given_before, ask_about_interrupted, carry_out
from flows.slots import free_stale_slots
from flows.stop_request import stop_on_signals_again
from postledger.batches.posts import (
    InputError,
    Post,
    default_posts_path,
    load_posts,
    parse_month,
    previous_month,
)
from postledger.defaults import MAX_IN_FLIGHT
from postledger.guards.spill import Spill
from postledger.ledger import Ledger, open_ledger
from postledger.preflight import NotReady, check_ready
from postledger.progress.status import status_of
from postledger.progress.words import SIMULATED
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchStatus
from postledger.record.month_lease import MonthBusy
from postledger.recovery.interrupted import Adoption, finish_saved_outputs, import_spill
from postledger.recovery.steps import recovery_plan
from postledger.settings import Settings, in_force
from postledger.upstreams import can_list
from tasks.upstream_calls import adopt_orphaned_tasks

__all__ = ["RunStopped", "monthly_posts"]


def _run_name() -> str:
    month = flow_run.parameters.get("month")
    try:
        return f"posts {parse_month(month) if month else previous_month()}"
    except InputError:
        # The run must start to say why it stops: the flow then fails with the message.
        return f"posts of a bad month {month!r}"


@flow(
    name="monthly-posts",
    flow_run_name=_run_name,  # resolved, so that `postledger approve` finds the month's run
    # Prefect types the parameter invariantly: its own thread pool runner needs the cast.
    task_runner=cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=8)),
    persist_result=False,
)
def monthly_posts(
    month: str | None = None,
    posts_path: str | None = None,
    poll: bool | None = None,
    resubmit: bool | None = None,
    upstream_block: str | None = None,
    ledger_block: str | None = None,
) -> dict[str, Any]:
    """Process one month of posts (default: the month before today, UTC).

    Prefect shows the descriptions below in the deployment's run form.

    Args:
        month: The month to process, as YYYY-MM (e.g. 2026-10). Empty: the month that just
            ended (UTC), as the monthly schedule wants.
        posts_path: The month's posts, a JSONL file (one {"id", "text"} object per line).
            Empty: data/posts/YYYY-MM.jsonl under the data folder of the settings.
        poll: Batches an earlier run sent but never saw answered, whose upstream task is
            known: yes, poll them. Free: polling is never charged. Empty: the run asks.
        resubmit: Interrupted batches with no known task: yes, send them again. May be
            charged twice, if the first send reached the upstream (`postledger plan` shows
            how much). Empty: the run asks, in its paused form.
        upstream_block: Name of a postledger-upstream block (URL, key, kind). Empty: the
            POSTLEDGER_UPSTREAM_* variables.
        ledger_block: Name of a postledger-ledger block (the ledger's database). Empty: the
            POSTLEDGER_DATABASE_URL variable, or the SQLite file in the project folder.
    """
    stop_on_signals_again()  # under `postledger run`: see flows/stop_request.py
    settings = settings_from_blocks(upstream_block, ledger_block)
    with in_force(settings), lighter_task_run_clients():
        return _monthly_posts(settings, month, posts_path, poll, resubmit)


def _monthly_posts(
    settings: Settings,
    month: str | None,
    posts_path: str | None,
    poll: bool | None,
    resubmit: bool | None,
) -> dict[str, Any]:
    month = parse_month(month) if month else previous_month()
    path = Path(posts_path) if posts_path else default_posts_path(settings.data_dir, month)
    posts = load_posts(path)  # a bad file stops here, before the ledger is touched
    try:
        check_ready(settings)  # so is a configuration that would stop every batch
    except NotReady as exc:
        raise RunStopped(f"{month}: nothing was done: {exc}") from None

    ledger_url = settings.resolved_database_url()
    ledger = open_ledger(ledger_url, busy_timeout=settings.sqlite_busy_timeout)
    holder = str(flow_run.id or uuid.uuid4())
    try:
        with ledger.leases.holding(month, holder) as taken_over_from:
            run = MonthRun(ledger, ledger_url, month, settings, holder, taken_over_from)
            return process_month(run, posts, path, poll, resubmit)
    except MonthBusy as exc:
        raise RunStopped(f"{month}: nothing was done: {exc}") from None
    except LedgerUnavailable as exc:
        raise RunStopped(f"{month}: nothing was sent: {exc}") from None


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


def process_month(
    run: MonthRun, posts: list[Post], path: Path, poll: bool | None, resubmit: bool | None
) -> dict[str, Any]:
    """The month's work, in the order of the rules: what an earlier run left first, then the
    safe work, then one question about what needs a yes, then the month's batches."""
    started = time.monotonic()
    try:
        import_what_was_left(run)
        know_the_posts(run, posts, path)
        finish_saved_outputs_first(run)
        unsearched = adopt_orphans(run)
        with run.ledger.plain() as reader:
            recovery = recovery_plan(reader, run.month, run.settings)
        answer = answer_given_before(
            run.ledger, run.month, recovery, run.settings, poll=poll, resubmit=resubmit
        )
        recovered = (
            carry_out(
                run.ledger,
                recovery,
                answer,
                run.settings,
                unsearched=unsearched,
                holder=run.holder,
            )
            if answer
            else Recovered()
        )
        run.ledger.replan_unsent(run.month)
    except LedgerUnavailable as exc:
        raise RunStopped(f"{run.month}: nothing was sent: {exc}") from None

    make_room_for_batches(run)
    artifacts = MonthArtifacts(run.ledger, run.month, run.settings)
    artifacts.update(force=True)
    try:
        stopped = run_batches(run, recovered, artifacts)
        if stopped is None and answer is None and recovery.needs_yes:
            # Asked once, after everything safe is done (R22–R24, R47).
            answer = ask_about_interrupted(
                run.ledger,
                run.month,
                recovery,
                run.settings,
                on_asked=lambda: artifacts.update(force=True),
            )
            if answer is not None:
                recovered = carry_out(
                    run.ledger,
                    recovery,
                    answer,
                    run.settings,
                    unsearched=unsearched,
                    holder=run.holder,
                )
                stopped = run_batches(run, recovered, artifacts)
    except LedgerUnavailable as exc:
        raise RunStopped(f"{run.month}: stopped, nothing more was sent: {exc}") from None
    finally:
        artifacts.finish()
    say_what_is_uncertain(run)
    say_how_it_ended(run, time.monotonic() - started)
    if stopped:
        raise RunStopped(f"{run.month}: stopped, nothing more was sent. {stopped}")
    return month_summary(run.ledger, run.month)


def import_what_was_left(run: MonthRun) -> None:
    """What an earlier run paid for but could not write comes first (R20, R46). One file per
    month; the one file of earlier versions holds every month's."""
    settings = run.settings
    for spill in (Spill(settings.spill_file(run.month)), Spill(settings.resolved_spill_path())):
        taken, kept_aside = import_spill(run.ledger, spill, settings.price())
        if taken:
            get_run_logger().warning(
                "imported %d records from %s, left by an earlier run", taken, spill.path
            )
        if kept_aside is not None:  # damaged lines: skipped, never deleted, said loudly (R46)
            get_run_logger().warning(kept_aside.message())


def know_the_posts(run: MonthRun, posts: list[Post], path: Path) -> None:
    """The ledger learns the month's posts: new, unchanged, or changed and so new work (R25)."""
    logger = get_run_logger()
    settings = run.settings
    if len(posts) >= due_work.LONG_STEP_POSTS:  # seconds of work: said before, not after
        logger.info("%s: writing %d posts of %s to the ledger", run.month, len(posts), path)
    synced = run.ledger.sync_posts(run.month, posts, model=settings.model, prompt=settings.prompt)
    if closed := run.ledger.close_emptied(run.month):
        logger.info("closed %d sent batches whose posts all changed since", len(closed))
    logger.info(
        "%s: %d posts in %s (%d new, %d unchanged, %d changed)",
        run.month,
        len(posts),
        path,
        synced.new,
        synced.unchanged,
        synced.changed,
    )


def finish_saved_outputs_first(run: MonthRun) -> None:
    """Safe work first: saved outputs are finished without calling the AI (R21)."""
    if finished := finish_saved_outputs(run.ledger, run.month, run.settings.limits()):
        get_run_logger().info("finished %d batches from their saved outputs", len(finished))


def adopt_orphans(run: MonthRun) -> list[str]:
    """Upstream tasks that interrupted batches made are found by their metadata and adopted,
    before anyone is asked to resubmit: looking is free (R49). Returns the batches whose look
    gave no answer: they may have been made, so nothing sends them again in this run."""
    if not can_list(run.settings):
        return []
    logger = get_run_logger()
    # Prefect types an async task's result as its coroutine; a submitted one is resolved.
    adopting = adopt_orphaned_tasks.submit(run.month, run.ledger_url, run.holder)
    adoption = cast("Adoption", adopting.result())
    if adoption.adopted:
        logger.warning("adopted the upstream tasks of interrupted batches: %s", adoption.adopted)
    if adoption.unsearched:
        logger.warning(
            "could not read the upstream's list of jobs for interrupted batches %s: they may "
            "have been made (and paid for), so they wait for a look that answers",
            adoption.unsearched,
        )
    return adoption.unsearched


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
    if uncertain := [b.batch_id for b in run.ledger.batches(month, BatchStatus.RUNNING)]:
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
