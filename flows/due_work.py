"""The month's work the dispatch loop asks the ledger for between starts: posts whose wait is
over and pending posts planned into batches, and whether anything is left to send."""

from __future__ import annotations

from prefect import get_run_logger

from postledger.ledger import Ledger, PostStatus
from postledger.settings import Settings
from processes.memory import give_back_freed_memory


def work_left(ledger: Ledger, month: str, skip: set[str]) -> bool:
    """Whether anything of the month may still be sent: pending, waiting or queued."""
    return ledger.has_posts(month, PostStatus.PENDING) or ledger.next_wake(month, skip) is not None


# A step over this many posts takes seconds: it is said before it starts, not only after, so
# that a log read by no terminal (a worker's) shows what the run is doing.
LONG_STEP_POSTS = 20_000


def plan_due_work(ledger: Ledger, month: str, settings: Settings) -> None:
    """Posts whose wait is over, and pending posts, into new batches (the writes happen only
    when there is something to write)."""
    if ledger.has_posts(month, PostStatus.WAITING):
        ledger.release_due(month)
    if pending := ledger.count_in(month, PostStatus.PENDING):
        if pending >= LONG_STEP_POSTS:
            get_run_logger().info("%s: planning %d posts into batches", month, pending)
        plan = ledger.plan(
            month,
            max_posts=settings.max_batch_posts,
            max_chars=settings.max_batch_chars,
            max_attempts=settings.max_attempts,
            keep_batches=False,  # counted, not listed: a month's are 40 000 lists of post ids
        )
        if pending >= LONG_STEP_POSTS:
            get_run_logger().info("%s: %d batches planned", month, plan.planned)
            give_back_freed_memory()  # the sync's and plan's chunks, before the jobs run
        if plan.too_long:
            get_run_logger().warning(
                "%d posts longer than max_batch_chars: not sent", plan.too_long
            )
