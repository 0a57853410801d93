"""The monthly flow: read the month's posts, make the ledger know them, plan batches, and run
them through the batch task, at most `max_in_flight` at once, until nothing is left to do.

Every decision is made from the ledger, so running this flow again for the same month picks up
where the last run stopped instead of starting over.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, cast

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from blocks import settings_from_blocks
from flows.artifacts import MonthArtifacts
from flows.dispatch import RunStopped, run_until_done
from flows.limits import ensure_tag_limit
from flows.local_server import LOCAL_SERVER_FLAG
from flows.recover import answer_given_before, ask_about_interrupted, carry_out
from flows.slots import free_stale_slots
from postledger.batches.posts import (
    Post,
    default_posts_path,
    load_posts,
    parse_month,
    previous_month,
)
from postledger.guards.spill import Spill
from postledger.ledger import Ledger, open_ledger
from postledger.preflight import NotReady, check_ready
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchStatus
from postledger.record.month_lease import MonthBusy
from postledger.recovery.interrupted import (
    finish_saved_outputs,
    import_spill,
    recovery_plan,
)
from postledger.settings import Settings, in_force
from postledger.upstreams import can_list
from postledger.upstreams.errors import UpstreamError
from tasks.upstream_calls import adopt_orphaned_tasks, with_request_retries

__all__ = ["RunStopped", "monthly_posts"]


def _run_name() -> str:
    month = flow_run.parameters.get("month")
    return f"posts {parse_month(month) if month else previous_month()}"


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

    `poll` / `resubmit`: a person's answers given up front about batches an earlier run sent
    but never saw answered — poll their known upstream tasks; send again those with no task id
    (which may be charged twice). Unset: the run asks, in its paused form, when it gets there.
    `upstream_block` / `ledger_block`: names of a `postledger-upstream` and a
    `postledger-ledger` block; what they leave unset comes from the `POSTLEDGER_*` variables.
    """
    settings = settings_from_blocks(upstream_block, ledger_block)
    with in_force(settings):
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
    ledger = open_ledger(ledger_url)
    holder = str(flow_run.id or uuid.uuid4())
    try:
        with ledger.leases.holding(month, holder):
            return process_month(
                ledger, ledger_url, month, posts, path, settings, poll, resubmit, holder
            )
    except MonthBusy as exc:
        raise RunStopped(f"{month}: nothing was done: {exc}") from None
    except LedgerUnavailable as exc:
        raise RunStopped(f"{month}: nothing was sent: {exc}") from None


def process_month(
    ledger: Ledger,
    ledger_url: str,
    month: str,
    posts: list[Post],
    path: Path,
    settings: Settings,
    poll: bool | None,
    resubmit: bool | None,
    holder: str,
) -> dict[str, Any]:
    """The month's work, while this run holds the month."""
    logger = get_run_logger()
    try:
        # What an earlier run paid for but could not write comes first (R20).
        # One file per month; the one file of earlier versions holds every month's.
        for spill in (Spill(settings.spill_file(month)), Spill(settings.resolved_spill_path())):
            if taken := import_spill(ledger, spill, settings.price()):
                logger.warning(
                    "imported %d records from %s, left by an earlier run", taken, spill.path
                )
        synced = ledger.sync_posts(month, posts, model=settings.model, prompt=settings.prompt)
        if closed := ledger.close_emptied(month):
            logger.info("closed %d sent batches whose posts all changed since", len(closed))
        # Safe work first: saved outputs are finished without calling the AI (R21).
        if finished := finish_saved_outputs(ledger, month, settings.limits()):
            logger.info("finished %d batches from their saved outputs", len(finished))
        if can_list(settings):  # before anyone is asked to resubmit (R24): free to look
            adopt = with_request_retries(adopt_orphaned_tasks, settings)
            try:
                if adopted := adopt.submit(month, ledger_url).result():
                    logger.warning("adopted the upstream tasks of interrupted batches: %s", adopted)
            except UpstreamError as exc:  # nothing adopted: recovery asks as it would anyway
                logger.warning("could not look for orphaned upstream tasks: %s", exc)
        plan = recovery_plan(ledger, month, settings)
        answer = answer_given_before(ledger, month, plan, settings, poll=poll, resubmit=resubmit)
        polls = carry_out(ledger, plan, answer, settings) if answer else []
        ledger.replan_unsent(month)
    except LedgerUnavailable as exc:
        raise RunStopped(f"{month}: nothing was sent: {exc}") from None
    logger.info(
        "%s: %d posts in %s (%d new, %d unchanged, %d changed)",
        month,
        len(posts),
        path,
        synced.new,
        synced.unchanged,
        synced.changed,
    )
    ensure_tag_limit()
    if os.environ.get(LOCAL_SERVER_FLAG):
        # Our local server runs no lease reaper: slots of a killed run would stay taken, and
        # this run would wait for them forever. (A full Prefect server reaps them itself.)
        for line in free_stale_slots():
            logger.warning("%s", line)

    artifacts = MonthArtifacts(ledger, month)
    artifacts.update(force=True)

    def run_batches(polls: list[str]) -> str | None:
        return run_until_done(
            ledger,
            month,
            ledger_url,
            settings,
            polls=polls,
            on_progress=artifacts.update,
            holder=holder,
        )

    try:
        stopped = run_batches(polls)
        if stopped is None and answer is None and plan.needs_yes:
            # R22-R24: asked once, after everything safe is done.
            try:
                answer = ask_about_interrupted(ledger, month, plan, settings)
            except LedgerUnavailable as exc:
                raise RunStopped(f"{month}: stopped, nothing more was sent: {exc}") from None
            if answer is not None:
                stopped = run_batches(carry_out(ledger, plan, answer, settings))
    finally:
        artifacts.finish()
    if uncertain := [b.batch_id for b in ledger.batches(month, BatchStatus.RUNNING)]:
        logger.warning(
            "%s: %d batches were sent but their outcome is not known yet (%s). Nothing of "
            "them is lost or sent again by itself: `postledger plan --month %s` shows them; the "
            "next run polls those with a task id when given --poll, and sends the others again "
            "only with --resubmit (which may be charged twice)",
            month,
            len(uncertain),
            ", ".join(uncertain[:10]) + (" …" if len(uncertain) > 10 else ""),
            month,
        )
    summary = month_summary(ledger, month)
    if stopped:
        raise RunStopped(f"{month}: stopped, nothing more was sent. {stopped}")
    return summary


def month_summary(ledger: Ledger, month: str) -> dict[str, Any]:
    counts = ledger.counts(month)
    return {"month": month, "counts": {status.value: n for status, n in counts.items()}}
