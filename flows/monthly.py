"""The monthly flow: read the month's posts, import what an earlier run left, make the ledger
know the posts, finish saved outputs, ask what needs a yes, run the month's batches within the
window (one `process-batch` task run each), and summarise.

Every decision is made from the ledger, so running this flow again for the same month picks up
where the last run stopped instead of starting over.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, cast

from prefect import flow
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from blocks import settings_from_blocks
from flows.api_clients import lighter_task_run_clients
from flows.dispatch import RunStopped
from flows.interrupted import ask_then_send_interrupted, take_stock_of_interrupted
from flows.month_steps import (
    MonthRun,
    artifacts_shown,
    finish_saved_outputs_first,
    forecast_the_month,
    import_what_was_left,
    know_the_posts,
    make_room_for_batches,
    month_summary,
    run_batches,
    say_how_it_ended,
    say_what_is_uncertain,
    stops_if_the_ledger_fails,
)
from flows.stop_request import stop_on_signals_again
from postledger.ledger import LedgerUnavailable, MonthBusy, open_ledger
from postledger.preflight import (
    AnalysisError,
    CheckedPosts,
    InputError,
    NotReady,
    check_posts,
    check_ready,
    default_posts_path,
    parse_month,
    previous_month,
)
from postledger.settings import Settings
from tasks.handled_faults import say_handled_faults_plainly

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
    analysis: str | None = None,
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
        analysis: What each post is asked (docs/analysis.md): a JSON Schema file
            (examples/support_triage.json) or a pydantic model (module:Model), from the
            project folder. Empty: POSTLEDGER_ANALYSIS, else the built-in analysis (category,
            sentiment, summary). A changed analysis is new work: posts are asked again.
    """
    stop_on_signals_again()  # under `postledger run`: see flows/stop_request.py
    say_handled_faults_plainly()  # an upstream fault the trip handles is no crash in the log
    settings = settings_from_blocks(upstream_block, ledger_block)
    if analysis:
        settings = settings.model_copy(update={"analysis": analysis})
    with lighter_task_run_clients():
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
    # A bad file stops here, before the ledger is touched; a good one is read again, a chunk
    # at a time, as the ledger learns it: the month is never held whole.
    posts = check_posts(path)
    try:  # and so does a bad analysis, read once for the whole run
        settings = settings.fixed_analysis()
    except AnalysisError as exc:
        raise RunStopped(
            f"{month}: nothing was done: the analysis cannot be used:\n{exc}"
        ) from None
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


def process_month(
    run: MonthRun, posts: CheckedPosts, path: Path, poll: bool | None, resubmit: bool | None
) -> dict[str, Any]:
    """The month's work, in the order of the rules: what an earlier run left first, then the
    safe work, then one question about what needs a yes, then the month's batches."""
    started = time.monotonic()
    with stops_if_the_ledger_fails(run, "nothing was sent"):
        import_what_was_left(run)
        know_the_posts(run, posts, path)
        finish_saved_outputs_first(run)
        interrupted = take_stock_of_interrupted(run, poll=poll, resubmit=resubmit)
        run.ledger.replan_unsent(run.month)
        if (over := forecast_the_month(run)) is not None:
            raise RunStopped(f"{run.month}: nothing was sent: {over}")
    make_room_for_batches(run)
    with (
        artifacts_shown(run) as artifacts,
        stops_if_the_ledger_fails(run, "stopped, nothing more was sent"),
    ):
        stopped = run_batches(run, interrupted.recovered, artifacts)
        if stopped is None and interrupted.needs_asking:
            stopped = ask_then_send_interrupted(run, interrupted, artifacts)
    say_what_is_uncertain(run)
    say_how_it_ended(run, time.monotonic() - started)
    if stopped:
        raise RunStopped(f"{run.month}: stopped, nothing more was sent. {stopped}")
    return month_summary(run.ledger, run.month)
