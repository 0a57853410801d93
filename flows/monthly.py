"""The monthly flow: read the month's posts, make the ledger know them, plan batches, and run
them through the batch task, at most `max_in_flight` at once.

Every decision is made from the ledger, so running this flow again for the same month picks up
where the last run stopped instead of starting over.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture, as_completed
from prefect.task_runners import ThreadPoolTaskRunner

from flows.limits import ensure_tag_limit
from postledger.ledger import Ledger, open_ledger
from postledger.models import BatchStatus
from postledger.posts import default_posts_path, load_posts, parse_month, previous_month
from postledger.settings import Settings
from tasks.batch import BatchOutcome, process_batch


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
    plan = ledger.plan(
        month, max_posts=settings.max_batch_posts, max_chars=settings.max_batch_chars
    )
    if plan.too_long:
        logger.warning("%d posts are longer than max_batch_chars and were not sent", plan.too_long)

    ensure_tag_limit()
    queued = [b.batch_id for b in ledger.batches(month, BatchStatus.QUEUED)]
    logger.info("%d batches to run, at most %d at once", len(queued), settings.max_in_flight)
    run_batches(queued, ledger_url, window=settings.max_in_flight)
    return month_summary(ledger, month)


def run_batches(batch_ids: list[str], ledger_url: str, *, window: int) -> list[BatchOutcome]:
    """Start batches in order (R9), never more than `window` at once, so that no task run sits
    waiting on the tag limit; take them back in whatever order they finish."""
    logger = get_run_logger()
    waiting = deque(batch_ids)
    in_flight: set[PrefectFuture[BatchOutcome]] = set()
    outcomes: list[BatchOutcome] = []
    while waiting or in_flight:
        while waiting and len(in_flight) < window:
            in_flight.add(process_batch.submit(waiting.popleft(), ledger_url))
        finished = next(as_completed(list(in_flight)))
        in_flight.remove(finished)
        try:
            outcomes.append(finished.result())
        except Exception as exc:  # R17: one broken batch must not stop the others
            logger.error("a batch task crashed: %s: %s", type(exc).__name__, exc)
    return outcomes


def month_summary(ledger: Ledger, month: str) -> dict[str, Any]:
    counts = ledger.counts(month)
    return {"month": month, "counts": {status.value: n for status, n in counts.items()}}
