"""The monthly flow: read the month's posts, make the ledger know them, plan batches, and run
them through the batch task, at most `max_in_flight` at once, until nothing is left to do.

Every decision is made from the ledger, so running this flow again for the same month picks up
where the last run stopped instead of starting over.
"""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture
from prefect.task_runners import ThreadPoolTaskRunner

from flows.limits import ensure_tag_limit
from postledger.ledger import Ledger, open_ledger
from postledger.models import PostStatus, utcnow
from postledger.posts import default_posts_path, load_posts, parse_month, previous_month
from postledger.settings import Settings
from tasks.batch import BatchOutcome, process_batch

# How long the flow sleeps at most between looks at the ledger while posts wait.
MAX_NAP_SECONDS = 5.0


class RunStopped(RuntimeError):
    """No further batch may start in this run (R14); the message says what to fix."""


@flow(
    name="monthly-posts",
    flow_run_name="posts {month}",
    task_runner=ThreadPoolTaskRunner(max_workers=8),
    persist_result=False,
)
def monthly_posts(month: str | None = None, posts_path: str | None = None) -> dict[str, Any]:
    """Process one month of posts (default: the month before today, UTC)."""
    logger = get_run_logger()
    settings = Settings()
    month = parse_month(month) if month else previous_month()
    path = Path(posts_path) if posts_path else default_posts_path(settings.data_dir, month)
    posts = load_posts(path)  # a bad file stops here, before the ledger is touched

    ledger_url = settings.resolved_database_url()
    ledger = open_ledger(ledger_url)
    synced = ledger.sync_posts(month, posts, model=settings.model, prompt=settings.prompt)
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
    ledger.replan_unsent(month)
    stopped = run_until_done(ledger, month, ledger_url, settings)
    summary = month_summary(ledger, month)
    if stopped:
        raise RunStopped(f"{month}: stopped, nothing more was sent. {stopped}")
    return summary


def run_until_done(ledger: Ledger, month: str, ledger_url: str, settings: Settings) -> str | None:
    """Start runnable batches in order (R9), never more than the window at once, so that no
    task run waits on the tag limit; take them back in whatever order they finish; plan what
    comes back (retries, halves, posts whose wait is over) until nothing is queued or waiting.
    Returns why the run had to stop early, if it had to."""
    logger = get_run_logger()
    window = settings.max_in_flight
    in_flight: dict[str, PrefectFuture[BatchOutcome]] = {}
    # Batch ids land here as their task runs end. Asking a future for its state instead would
    # cost an API round trip per running batch on every wake-up, right when a slot is free.
    ended: queue.SimpleQueue[str] = queue.SimpleQueue()
    crashed: set[str] = set()  # not started again in this run: whatever broke would again
    stop: str | None = None

    while True:
        if stop is None:
            counts = ledger.counts(month)  # a read: the writes below happen only when needed
            if counts[PostStatus.WAITING]:
                ledger.release_due(month)
                counts = ledger.counts(month)
            if counts[PostStatus.PENDING]:
                plan = ledger.plan(
                    month, max_posts=settings.max_batch_posts, max_chars=settings.max_batch_chars
                )
                if plan.too_long:
                    logger.warning("%d posts longer than max_batch_chars: not sent", plan.too_long)
            for batch in ledger.runnable_batches(month):
                if len(in_flight) >= window:
                    break
                if batch.batch_id not in in_flight and batch.batch_id not in crashed:
                    future = process_batch.submit(batch.batch_id, ledger_url)
                    future.add_done_callback(lambda _, batch_id=batch.batch_id: ended.put(batch_id))
                    in_flight[batch.batch_id] = future

        if not in_flight:
            wake = None if stop else ledger.next_wake(month, skip=crashed)
            if wake is None:
                return stop
            time.sleep(min(MAX_NAP_SECONDS, max((wake - utcnow()).total_seconds(), 0.01)))
            continue

        try:
            finished = [ended.get(timeout=MAX_NAP_SECONDS)]
        except queue.Empty:
            continue  # a nap: posts whose wait is over may be planned meanwhile
        while not ended.empty():
            finished.append(ended.get_nowait())
        for batch_id in finished:
            future = in_flight.pop(batch_id)
            try:
                outcome = future.result()
            except Exception as exc:  # R17: one broken batch must not stop the others
                logger.error("batch %s crashed: %s: %s", batch_id, type(exc).__name__, exc)
                crashed.add(batch_id)
                continue
            if outcome.stop_run and stop is None:
                stop = outcome.stop_run
                logger.error("no further batch will start in this run: %s", stop)


def month_summary(ledger: Ledger, month: str) -> dict[str, Any]:
    counts = ledger.counts(month)
    return {"month": month, "counts": {status.value: n for status, n in counts.items()}}
