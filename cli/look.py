"""`postledger status`, `report`, `plan` and `breaker`: the month, its results, its interrupted
batches and the breakers, read from the ledger alone (opened read-only, in plain SQL with no ORM,
and never a call to the AI)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from cli.shared import MonthOption, checked_month, err, load_settings, out, unknown_month
from postledger.record.plain import read_only

if TYPE_CHECKING:
    from postledger.record.figures import FailedPost

StatusLook = tuple[dict[str, Any] | None, list["FailedPost"]]


def status(
    month: MonthOption,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            "-w",
            help="Refresh every few seconds until the month ends (or Ctrl-C); a month not "
            "started yet is waited for.",
        ),
    ] = False,
    every: Annotated[float, typer.Option(help="Seconds between refreshes with --watch.")] = 3.0,
    failed: Annotated[
        bool, typer.Option("--failed", help="List every failed post with its kind and reason.")
    ] = False,
) -> None:
    """Where MONTH stands, read from the ledger alone: it opens the ledger read-only and makes
    no network call at all."""
    # No settings object and no ORM: the ledger's URL and a few queries in plain SQL are all
    # this needs, and it answers in a fraction of a second.
    from postledger.defaults import ledger_url
    from postledger.progress.status import status
    from postledger.progress.tables import (
        failed_posts_table,
        failures_table,
        jobs_table,
        status_table,
    )
    from postledger.record.figures import failed_posts
    from postledger.record.plain import database_url_from_environment

    month = checked_month(month)
    url = ledger_url(database_url_from_environment(), create_folder=False)

    def look() -> StatusLook:
        with read_only(url) as reader:
            if reader is None:
                return None, []
            return status(reader, month), failed_posts(reader, month) if failed else []

    def show(report: dict[str, Any], failed_list: list[FailedPost]) -> None:
        if as_json:
            sys.stdout.write(json.dumps(report, indent=2) + "\n")
            return
        out.print(status_table(report))
        if (jobs := jobs_table(report)) is not None:
            out.print(jobs)
        if (table := failures_table(report)) is not None:
            out.print(table)
        if failed:
            out.print(failed_posts_table(month, failed_list))

    if watch:
        _watch(month, every, look, show)
        return
    report, failed_list = look()
    if report is None:
        err.print(f"[yellow]{unknown_month(month)}[/]")
        raise typer.Exit(1)
    show(report, failed_list)


def _watch(
    month: str,
    every: float,
    look: Callable[[], StatusLook],
    show: Callable[[dict[str, Any], list[FailedPost]], None],
) -> None:
    """`status --watch`: the month shown again every `every` seconds until it ends or Ctrl-C."""
    import signal
    import threading
    from datetime import UTC, datetime

    # Ctrl-C sets a flag rather than raising: a KeyboardInterrupt that lands inside a driver's
    # clean-up is swallowed there ("Exception ignored in ..."), and the loop would go on.
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.is_set():
        report, failed_list = look()
        out.clear()
        out.print(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC, every {every:g} s (Ctrl-C: stop)")
        if report is None:
            out.print(f"waiting for {month} to start: the ledger knows nothing of it yet")
        else:
            show(report, failed_list)
            if report["unfinished"] == 0 and report["waiting_for"] is None:
                out.print(f"{month} has ended: every post is completed or failed.")
                return
        stop.wait(every)


def report(
    month: MonthOption,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write the files to.")] = Path(
        "reports"
    ),
    with_text: Annotated[
        bool,
        typer.Option(
            "--text", help="Put each post's text in the rows too (left out by default: long)."
        ),
    ] = False,
    parquet: Annotated[
        bool,
        typer.Option(
            "--parquet",
            help="Also write posts-MONTH.parquet, the same rows for a dataframe. Needs pyarrow: "
            "`uv sync --extra parquet` (or `pip install 'postledger[parquet]'`).",
        ),
    ] = False,
) -> None:
    """Write MONTH's results for the people who use them, read from the ledger only (the AI is
    never called).

    posts-MONTH.csv and posts-MONTH.jsonl hold one row per post: its id, the other fields of
    its input line (author, source, …; a name the report uses itself gets the prefix input_),
    its status, one column per field of the analysis it was asked (category, sentiment and
    summary for the built-in one; typed in Parquet), why it failed, its paid attempts, and what it
    cost: cost_currency_units is its share of the month's confirmed spend (each batch's cost
    shared over its posts by characters, so the column adds up to the confirmed spend
    exactly), wasted_currency_units its share of spend paid for unusable output. Amounts are in
    the currency of the price table. summary-MONTH.md: the month in a page, with the completed
    posts counted by each value of each enum, list and true/false field."""
    # Plain SQL and no ORM, as `status`: one snapshot of the ledger, opened read-only.
    from postledger.defaults import ledger_url
    from postledger.progress.parquet import MissingPyarrow
    from postledger.progress.report import write_report
    from postledger.progress.status import status
    from postledger.record.plain import database_url_from_environment

    month = checked_month(month)
    url = ledger_url(database_url_from_environment(), create_folder=False)
    with read_only(url) as reader:
        summary = status(reader, month) if reader is not None else None
        if reader is None or summary is None:
            err.print(f"[yellow]The ledger knows nothing of {month} yet.[/]")
            raise typer.Exit(1)
        try:
            written = write_report(reader, month, summary, out_dir, text=with_text, parquet=parquet)
        except MissingPyarrow as missing:
            # One line, whatever the terminal's width; "[parquet]" is text, not markup.
            err.print(f"[red]error:[/] {escape(str(missing))}", soft_wrap=True, highlight=False)
            raise typer.Exit(1) from None
    for path in written:
        out.print(f"wrote {path}")


def plan_command(
    month: MonthOption,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What the next run would do with MONTH's interrupted batches, and the cost at risk.
    Reads the ledger only (never calls the AI)."""
    # Plain SQL and no ORM, as `status`: it answers in a fraction of a second.
    from postledger.progress.tables import recovery_table
    from postledger.record.rows import knows_month
    from postledger.recovery.steps import in_flight_words, recovery_plan

    month = checked_month(month)
    settings = load_settings()
    with read_only(settings.resolved_database_url(create_folder=False)) as reader:
        if reader is None or not knows_month(reader, month):
            err.print(f"[yellow]{unknown_month(month)}[/]")
            raise typer.Exit(1)
        plan = recovery_plan(reader, month, settings)
    if as_json:
        sys.stdout.write(json.dumps({"month": month, **plan.summary()}, indent=2) + "\n")
    else:
        out.print(recovery_table(month, plan))
        if plan.in_flight:
            out.print(in_flight_words(month, plan.in_flight))


def breaker(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The circuit breakers (one per upstream), their history and what to do. Reads the ledger
    only (never calls the AI)."""
    from postledger.progress.status import breaker_report
    from postledger.progress.tables import breaker_tables

    settings = load_settings()
    with read_only(settings.resolved_database_url(create_folder=False)) as reader:
        report = breaker_report(reader, settings.breaker_name())
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        for table in breaker_tables(report):
            out.print(table)
