"""Where a month stands, computed from the ledger alone (R28, R30): never from a queue, never
by asking the AI."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.table import Table
from sqlalchemy.engine import make_url

from postledger.ledger import Ledger
from postledger.models import BatchStatus, PostStatus
from postledger.policy import CONTINUE_HINTS
from postledger.settings import Settings

UNFINISHED = (
    PostStatus.PENDING,
    PostStatus.QUEUED,
    PostStatus.WAITING,
    PostStatus.RUNNING,
    PostStatus.RECEIVED,
)


def open_read_only(settings: Settings) -> Ledger | None:
    """The ledger opened so that nothing can be written; None if there is no ledger yet."""
    url = settings.resolved_database_url(create_folder=False)  # looking creates nothing
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
        return None
    return Ledger(url, read_only=True)


def month_status(settings: Settings, month: str) -> dict[str, Any] | None:
    ledger = open_read_only(settings)
    if ledger is None:
        return None
    try:
        return status_of(ledger, month)
    finally:
        ledger.close()


def status_of(ledger: Ledger, month: str) -> dict[str, Any] | None:
    counts = ledger.counts(month)
    total = sum(counts.values())
    if total == 0:
        return None
    failed = ledger.posts(month, PostStatus.FAILED)
    by_kind = Counter(p.failure_kind for p in failed)
    sample = {p.failure_kind: p.failure_reason for p in reversed(failed)}
    batch_counts = Counter(b.status for b in ledger.batches(month))
    return {
        "month": month,
        "total": total,
        "counts": {status.value: counts[status] for status in PostStatus},
        "completed": counts[PostStatus.COMPLETED],
        "failed": counts[PostStatus.FAILED],
        "unfinished": sum(counts[s] for s in UNFINISHED),
        "batches": {status.value: batch_counts.get(status, 0) for status in BatchStatus},
        "failures": [
            {
                "kind": kind.value if kind else None,
                "count": n,
                "sample_reason": sample[kind],
                "how_to_continue": CONTINUE_HINTS.get(kind) if kind else None,
            }
            for kind, n in by_kind.most_common()
        ],
    }


def status_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"postledger {report['month']}: {report['total']} posts", min_width=40)
    table.add_column("state")
    table.add_column("posts", justify="right")
    for status, n in report["counts"].items():
        style = {"completed": "green", "failed": "red"}.get(status, "")
        table.add_row(f"[{style}]{status}[/]" if style else status, str(n))
    table.add_section()
    table.add_row("unfinished", str(report["unfinished"]))
    for failure in report["failures"]:
        table.add_row(f"[red]failed: {failure['kind']}[/]", str(failure["count"]))
    return table


def failures_table(report: dict[str, Any]) -> Table | None:
    if not report["failures"]:
        return None
    table = Table(title="why posts failed, and how to continue")
    for column in ("kind", "posts", "a reason", "how to continue"):
        table.add_column(column, overflow="fold")
    for failure in report["failures"]:
        table.add_row(
            failure["kind"],
            str(failure["count"]),
            failure["sample_reason"] or "",
            failure["how_to_continue"] or "",
        )
    return table
