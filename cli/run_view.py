"""What `postledger run` shows while the month runs and when it ends: a live bar fed from the
ledger (or a plain line now and then where there is no terminal), the questions a paused run
asks, and the month's summary."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from postledger.ledger import Ledger
from postledger.progress import money
from postledger.progress.status import progress_of, status_of, what_is_asked
from postledger.record.models import Question
from postledger.settings import Settings


def what_this_run_did(ended: dict[str, int], after: dict[str, Any]) -> str:
    """What this run did to the month, in one line: the posts it ended (`ended`, from the
    ledger's events of this run), and what is left."""
    left = after["unfinished"]
    if not any(ended.values()):
        if left == 0:
            return "this run: nothing was sent, nothing was left to do"
        return f"this run: nothing was finished; {left} posts are left"
    tail = "nothing is left" if left == 0 else f"{left} posts are left"
    return f"this run: {ended['completed']} completed, {ended['failed']} failed; {tail}"


def shown(url: str) -> str:
    """The ledger's URL as it may be printed: a file path as a path, never a password."""
    from sqlalchemy.engine import make_url

    from postledger.record.db import safe_url

    parsed = make_url(url)
    if parsed.drivername.startswith("sqlite") and parsed.database:
        return str(Path(parsed.database).resolve())
    return safe_url(url)


def _paused(kind: Question, month: str, *, embedded: bool) -> str:
    """Why the run waits and how to answer, in full. This run's private server serves no UI:
    then only the command, typed in another terminal, answers it."""
    asks, answer_with = what_is_asked(kind, month)
    where = "in another terminal" if embedded else "in the Prefect UI (Resume) or"
    return f"[red]paused: {asks}.[/] Answer {where} with `{answer_with}`"


class SpendAgainstForecast:
    """The month's spend so far against its forecast: what the month should cost in all, as
    the run forecast it before sending and kept in the ledger. Nothing to say before the run
    has kept it, or without a price for the model."""

    def __init__(self, ledger: Ledger, month: str) -> None:
        self._ledger, self._month = ledger, month

    def words(self) -> str:
        try:
            forecast = self._ledger.forecast_total(self._month)
        except Exception:  # a progress line is never worth a failed run
            return ""
        if forecast is None:
            return ""
        spend = self._ledger.spend_totals(self._month)
        committed = spend["confirmed"] + spend["possible"] + spend["wasted"]
        return f"spend {money(committed)} of {money(forecast)} forecast"


class ProgressLines:
    """Where there is no live bar: a plain line each tenth of the month ended, and at least
    every `EVERY` seconds while nothing does."""

    EVERY = 30.0

    def __init__(self, month: str, total: int, console: Console) -> None:
        self._month, self._total, self._console = month, total, console
        self._started = self._last = time.monotonic()
        self._step = max(1, total // 10)
        self._ended_then = 0

    def maybe_print(self, report: dict[str, Any] | None, spend: str = "") -> None:
        now = time.monotonic()
        ended = 0 if report is None else report["completed"] + report["failed"]
        if ended < self._ended_then + self._step and now - self._last < self.EVERY:
            return
        self._last, self._ended_then = now, ended
        minutes, seconds = divmod(int(now - self._started), 60)
        elapsed = f"{minutes}m{seconds:02d}s"
        if report is None:
            line = f"{self._month}: starting Prefect and recording the posts… {elapsed}"
        else:
            line = (
                f"{self._month}: {ended} of {self._total} posts ended ({report['completed']} "
                f"completed, {report['failed']} failed), {report['counts']['running']} "
                f"running, {elapsed}" + (f"; {spend}" if spend else "")
            )
            # A Batch API job: what its upstream last counted, said to be its own counts.
            line += "".join(f"\n  {job['said']}" for job in report.get("upstream_jobs", []))
        self._console.print(line, highlight=False, markup=False)


@contextmanager
def progress_bar(
    ledger: Ledger,
    month: str,
    total: int,
    console: Console,
    settings: Settings,
    *,
    embedded: bool,
) -> Iterator[None]:
    stop = threading.Event()
    progress = Progress(
        TextColumn(f"[bold]{month}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    bar = progress.add_task("posts", total=total, detail="starting Prefect…")

    told: set[int | None] = set()  # the questions already printed in full
    # No live bar where the output is not a terminal (a log file, a pipe, cron): a line now
    # and then instead, so that a long run is never silent.
    lines = None if console.is_terminal else ProgressLines(month, total, console)
    spend = SpendAgainstForecast(ledger, month)

    def refresh() -> None:
        while not stop.wait(0.5):
            report = progress_of(ledger, month)  # light: this runs beside the batches
            spent = spend.words() if report is not None else ""
            if lines is not None:
                lines.maybe_print(report, spent)
            if report is None:
                continue
            detail = (
                f"{report['completed']} completed, {report['failed']} failed, "
                f"{report['counts']['running']} running" + (f", {spent}" if spent else "")
            )
            for job in report.get(
                "upstream_jobs", []
            ):  # a Batch API job, as its upstream counts it
                detail += f"; {escape(job['short'])}"
            if (question := ledger.approvals.waiting(month)) is not None:
                # In full above the bar, once: the bar's line is cut at the terminal's width.
                if question.id not in told:
                    told.add(question.id)
                    progress.console.print(_paused(question.kind, month, embedded=embedded))
                detail = "[red]paused: waiting for a person's answer (see above)[/]"
            progress.update(bar, completed=report["completed"] + report["failed"], detail=detail)

    watcher = threading.Thread(target=refresh, name="postledger-progress", daemon=True)
    with progress:
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()
            report = status_of(ledger, month)
            if report is not None:
                progress.update(bar, completed=report["completed"] + report["failed"], detail="")
