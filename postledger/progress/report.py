"""A month's results for the people who use the analysis: one row per post (JSONL and CSV) and
a markdown summary — from the ledger alone, never calling the AI (R30)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

from postledger.guards.spend import money
from postledger.record.models import SpendState
from postledger.record.reads import LedgerReads

RESULT_FIELDS = ("category", "sentiment", "summary")
COLUMNS = (
    "id",
    "status",
    *RESULT_FIELDS,
    "failure_kind",
    "failure_reason",
    "attempts",
    "cost_share",
)


def post_rows(ledger: LedgerReads, month: str) -> list[dict[str, Any]]:
    """One row per post. `cost_share`: the post's share (by its characters) of the settled
    cost of the batches it was in, in micro-units."""
    shares: Counter[str] = Counter()
    paid: Counter[str] = Counter()  # per batch, every settled charge of it
    for row in ledger.spend(month):
        if row.state in (SpendState.CONFIRMED, SpendState.WASTED):
            paid[row.batch_id] += row.cost if row.cost is not None else (row.estimated_cost or 0)
    for batch in ledger.batches(month):
        cost = paid[batch.batch_id]
        if not cost or not batch.request:
            continue
        chars = sum(len(text) for _, text in batch.request) or 1
        for post_id, text in batch.request:
            shares[post_id] += cost * len(text) // chars
    rows = []
    for post in ledger.posts(month):
        result = post.result or {}
        rows.append(
            {
                "id": post.post_id,
                "status": post.status.value,
                **{name: result.get(name) for name in RESULT_FIELDS},
                "failure_kind": post.failure_kind.value if post.failure_kind else None,
                "failure_reason": post.failure_reason,
                "attempts": post.attempts,
                "cost_share": shares[post.post_id],
            }
        )
    return rows


def summary_markdown(report: dict[str, Any], wall_seconds: float | None = None) -> str:
    """The month in a page: counts, what is still open, retries, people, money."""
    counts = report["counts"]
    still = {s: counts[s] for s in ("pending", "queued", "waiting", "running", "received")}
    spend, retries, approvals = report["spend"], report["retries"], report["approvals"]
    done = report["unfinished"] == 0
    lines = [
        f"# postledger {report['month']}",
        "",
        f"**{report['completed']} of {report['total']} posts completed**, "
        f"{report['failed']} failed"
        + (
            "; every post has ended."
            if done
            else f"; **{report['unfinished']} not finished** "
            + ", ".join(f"{n} {s}" for s, n in still.items() if n)
            + " (an empty queue is not done)."
        ),
        "",
        "| state | posts |",
        "| --- | --- |",
        *[f"| {state} | {n} |" for state, n in counts.items()],
        "",
        "| | |",
        "| --- | --- |",
        f"| business retries (paid) | {retries['business']} |",
        f"| requeues (unpaid) | {retries['requeues']} |",
        f"| request retries | {retries['request']} |",
        f"| bisections | {report['bisections']} |",
        f"| breaker events | {report['breaker_events']} |",
        f"| approvals asked / given / refused / unanswered | {approvals['asked']} / "
        f"{approvals['given']} / {approvals['refused']} / {approvals['unanswered']} |",
        f"| spend confirmed | {money(spend['confirmed'])} |",
        f"| spend possible (sent, outcome unknown) | {money(spend['possible'])} |",
        f"| spend wasted (paid, unusable) | {money(spend['wasted'])} |",
        f"| tokens in / out | {spend['input_tokens']} / {spend['output_tokens']} |",
    ]
    if wall_seconds is not None:
        lines.append(f"| wall time | {wall_seconds:.1f} s |")
    if report["failures"]:
        lines += ["", "| failed: kind | posts | how to continue |", "| --- | --- | --- |"]
        lines += [
            f"| {f['kind']} | {f['count']} | {f['how_to_continue'] or 'nothing: it is final'} |"
            for f in report["failures"]
        ]
    return "\n".join(lines) + "\n"


def write_report(ledger: LedgerReads, month: str, report: dict[str, Any], out: Path) -> list[Path]:
    """`posts-YYYY-MM.jsonl`, `posts-YYYY-MM.csv` and `summary-YYYY-MM.md` in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    rows = post_rows(ledger, month)
    jsonl, table, summary = (
        out / f"posts-{month}.jsonl",
        out / f"posts-{month}.csv",
        out / f"summary-{month}.md",
    )
    jsonl.write_text(
        "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
    )
    with table.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    summary.write_text(summary_markdown(report), encoding="utf-8")
    return [jsonl, table, summary]


def completed_share(report: dict[str, Any]) -> float:
    """Percent of posts completed (R29: only completed counts as done)."""
    return 100.0 * report["completed"] / report["total"] if report["total"] else 0.0
