"""A month's results for the people who use the analysis: one row per post (JSONL, CSV and, with
pyarrow, Parquet), the input's own fields beside the result and the post's share of the spend,
and a markdown summary — from the ledger alone, never calling the AI (R30)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from postledger.analysis import FieldKind
from postledger.guards.spend import money
from postledger.progress.answers import answer_fields
from postledger.progress.month_table import (
    COST,
    FAILURE,
    INPUT_PREFIX,
    MICRO,
    STATUS,
    TAKEN,
    WASTED,
    MonthTable,
    csv_cell,
)
from postledger.progress.shares import month_shares
from postledger.progress.words import SIMULATED_SPEND
from postledger.record import rows as ledger_rows
from postledger.record.kinds import PostStatus
from postledger.record.plain import Reader


def post_rows(reader: Reader, month: str, *, text: bool = False) -> MonthTable:
    """The month's posts as rows: the id, the input's own fields (every field any post has,
    in the order first met), the text if asked for, the outcome, and the post's share of the
    confirmed and of the wasted spend (`postledger.progress.shares`): each column adds up to
    the month's spend of its kind exactly."""
    shares = month_shares(
        ledger_rows.charges(reader, month), ledger_rows.sent_requests(reader, month)
    )
    posts = ledger_rows.reported_posts(reader, month)
    answers = answer_fields(reader, posts)
    given = [_writable(json.loads(post.fields)) if post.fields else {} for post in posts]
    inputs = input_columns(given, taken=frozenset(answers))
    by_field = {name: column for column, name in inputs.items()}
    outcome = [*STATUS, *answers, *FAILURE]
    columns = ["id", *inputs, *(["text"] if text else []), *outcome, COST, WASTED]
    rows = []
    for post, fields in zip(posts, given, strict=True):
        result = post.result or {}
        row: dict[str, Any] = {"id": post.post_id, **dict.fromkeys(inputs)}
        row |= {by_field[name]: value for name, value in fields.items()}
        if text:
            row["text"] = post.text
        row |= {
            "status": post.status.value,
            **{name: result.get(name) for name in answers},
            "failure_kind": post.failure_kind.value if post.failure_kind else None,
            "failure_reason": post.failure_reason,
            "attempts": post.attempts,
            COST: shares.confirmed[post.post_id],
            WASTED: shares.wasted[post.post_id],
        }
        rows.append(row)
    return MonthTable(columns=columns, inputs=inputs, answers=answers, rows=rows)


def _writable(value: Any) -> Any:
    """The input's value with every lone surrogate (a broken emoji's `\\ud83d` escape, which
    the input may hold and the ledger keeps escaped) written as that escape's text: no file
    format of the report can hold a lone surrogate itself."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_writable(key): _writable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_writable(item) for item in value]
    return value


def input_columns(
    given: list[dict[str, Any]], taken: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Column name → input field name, for every field name in the order first met. A name
    the report uses itself ("status", an answer's field in `taken`, …) gets the prefix
    `input_` (again, until it is free), so that neither hides the other."""
    columns: dict[str, str] = {}
    met: set[str] = set()
    for fields in given:
        for name in fields:
            if name in met:
                continue
            met.add(name)
            column = name
            while column in TAKEN or column in taken or column in columns:
                column = INPUT_PREFIX + column
            columns[column] = name
    return columns


def json_row(table: MonthTable, row: dict[str, Any]) -> dict[str, Any]:
    """A row as JSONL gives it: values as they are, money in currency units (an exact decimal
    string) and in integer micro-units."""
    shown = {column: row[column] for column in table.columns}
    shown |= {column: money(row[column]) for column in MICRO}
    shown |= {micro: row[column] for column, micro in MICRO.items()}
    return shown


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
    if spend["cached_input_tokens"] or spend["cache_write_tokens"]:
        lines.append(
            "| input tokens read from / written to the prompt cache | "
            f"{spend['cached_input_tokens']} / {spend['cache_write_tokens']} |"
        )
    if spend["simulated"]:
        lines.append(f"| spend | {SIMULATED_SPEND} |")
    if wall_seconds is not None:
        lines.append(f"| wall time | {wall_seconds:.1f} s |")
    if report["failures"]:
        lines += ["", "| failed: kind | posts | how to continue |", "| --- | --- | --- |"]
        lines += [
            f"| {f['kind']} | {f['count']} | {f['how_to_continue'] or 'nothing: it is final'} |"
            for f in report["failures"]
        ]
    return "\n".join(lines) + "\n"


def results_markdown(table: MonthTable, csv_name: str) -> str:
    """What the completed posts say (counts of each value of each enum field of the answer: a
    list's values each count), and what the cost columns of the rows hold."""
    completed = [row for row in table.rows if row["status"] == PostStatus.COMPLETED.value]
    lines: list[str] = []
    for name, field in table.answers.items():
        if field.kind not in (FieldKind.ENUM, FieldKind.ENUM_LIST, FieldKind.BOOLEAN):
            continue
        found = Counter(value for row in completed for value in _counted(row[name]))
        lines += ["", f"| {name} | completed posts |", "| --- | --- |"]
        lines += [f"| {value} | {n} |" for value, n in sorted(found.items(), key=_most_first)]
        if not found:
            lines.append("| (no completed post yet) | 0 |")
    lines += [
        "",
        f"Cost per post, in `{csv_name}`: `{COST}` is each post's share of the confirmed "
        "spend of the batches that sent it, shared by characters; the column adds up to the "
        f"month's confirmed spend exactly ({money(table.total(COST))}). `{WASTED}` shares the "
        f"wasted spend (paid, output unusable) the same way ({money(table.total(WASTED))}). "
        "Spend still possible (sent, outcome unknown) is in neither column. Amounts are in "
        "units of the currency of the price table (POSTLEDGER_PRICES).",
    ]
    return "\n".join(lines) + "\n"


def _counted(value: Any) -> list[Any]:
    if value is None:
        return ["(none)"]
    if isinstance(value, bool):
        return [json.dumps(value)]
    return list(value) if isinstance(value, list) else [value]


def _most_first(item: tuple[Any, int]) -> tuple[int, str]:
    return -item[1], str(item[0])


def write_report(
    reader: Reader,
    month: str,
    report: dict[str, Any],
    out: Path,
    *,
    text: bool = False,
    parquet: bool = False,
) -> list[Path]:
    """`posts-YYYY-MM.jsonl`, `posts-YYYY-MM.csv`, `summary-YYYY-MM.md` in `out`, and with
    `parquet`, `posts-YYYY-MM.parquet`. `text`: the posts' text in the rows too. Without
    pyarrow, `parquet` raises `parquet.MissingPyarrow` before anything is written."""
    # Imported here: it imports this module (and pyarrow only when asked to write).
    from postledger.progress.parquet import writer as parquet_writer

    writer = parquet_writer() if parquet else None
    out.mkdir(parents=True, exist_ok=True)
    table = post_rows(reader, month, text=text)
    jsonl, csv_path, summary = (
        out / f"posts-{month}.jsonl",
        out / f"posts-{month}.csv",
        out / f"summary-{month}.md",
    )
    # Each file is written beside its name and then put in its place: a report that fails
    # half-way leaves the last good one as it was.
    with _replacing(jsonl) as partial, partial.open("w", encoding="utf-8") as file:
        for row in table.rows:
            file.write(json.dumps(json_row(table, row), ensure_ascii=False) + "\n")
    with _replacing(csv_path) as partial, partial.open("w", newline="", encoding="utf-8") as file:
        cells = csv.writer(file)
        cells.writerow(table.columns)
        cells.writerows([csv_cell(c, row[c]) for c in table.columns] for row in table.rows)
    with _replacing(summary) as partial:
        partial.write_text(
            summary_markdown(report) + results_markdown(table, csv_path.name), encoding="utf-8"
        )
    written = [jsonl, csv_path, summary]
    if writer is not None:
        parquet_path = out / f"posts-{month}.parquet"
        with _replacing(parquet_path) as partial:
            writer(table, partial)
        written.append(parquet_path)
    return written


@contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    """A file to write `path`'s new content to; it replaces `path` only once written whole."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        yield partial
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def completed_share(report: dict[str, Any]) -> float:
    """Percent of posts completed (R29: only completed counts as done)."""
    return 100.0 * report["completed"] / report["total"] if report["total"] else 0.0
