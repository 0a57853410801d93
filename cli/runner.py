"""`postledger run`: the monthly flow in this process, with the simulator when no upstream is
configured, a live progress bar fed from the ledger, and a summary at the end."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cli.run_logs import logs_above_the_bar
from postledger.batches.posts import InputError, default_posts_path, load_posts
from postledger.ledger import Ledger
from postledger.progress.status import progress_of, status_of, what_is_asked
from postledger.progress.tables import failures_table, status_table
from postledger.progress.words import BUNDLED_SIMULATOR
from postledger.record.models import Question
from postledger.settings import Settings
from simulator.server import StartingSimulator, starting_simulator


def run_month(
    month: str,
    posts_path: Path | None,
    *,
    sim_latency: float,
    console: Console,
    verbose: bool = False,
    poll: bool | None = None,
    resubmit: bool | None = None,
) -> int:
    """Returns the exit code: 0 when every post ended (completed or failed), 1 otherwise."""
    settings = Settings()
    path = posts_path or default_posts_path(settings.data_dir, month)
    try:
        total = len(load_posts(path))  # fail fast, before Prefect starts, with the same message
    except InputError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2

    from flows.local_server import LocalServer, LocalServerBusy, starting_local_prefect_server

    with ExitStack() as running:
        # Prefect's local mode, through our launcher (see flows/local_server.py for why), unless
        # the user points us at a Prefect server of their own. The server first: when another
        # run holds this PREFECT_HOME's local server, this run is refused before it starts
        # anything or touches the ledger.
        server: LocalServer | None = None
        if not os.environ.get("PREFECT_API_URL"):
            try:
                server = running.enter_context(starting_local_prefect_server())
            except LocalServerBusy as exc:
                console.print(f"[red]error:[/] {escape(exc.message)}")
                return 1
        simulator: StartingSimulator | None = None
        if not settings.upstream_url:
            console.print(
                "[yellow]No upstream configured (POSTLEDGER_UPSTREAM_URL): using the bundled "
                "simulator. No real AI is called and nothing is paid.[/]"
            )
            simulator = running.enter_context(starting_simulator(latency=sim_latency))
            # One name for every run's simulator, whatever its port: its breaker persists (R18).
            os.environ.setdefault("POSTLEDGER_UPSTREAM_NAME", BUNDLED_SIMULATOR)
            # The bundled simulator honours idempotency keys, as the task API kind may not.
            os.environ.setdefault("POSTLEDGER_UPSTREAM_IDEMPOTENT", "true")
        # Prefect is imported while the server and the simulator start (a few seconds each):
        # the environment already points it at the server.
        from flows.monthly import RunStopped, monthly_posts

        if simulator is None:
            url = settings.upstream_url
        else:  # the simulator speaks every kind, each at its usual base URL
            url = settings.upstream_kind.base_url_of(simulator.wait_ready())
        os.environ["POSTLEDGER_UPSTREAM_URL"] = str(url)
        if server is not None:
            server.wait_ready()
        ledger = Ledger(settings.resolved_database_url())
        before = progress_of(ledger, month)
        stopped: str | None = None
        with (
            _progress_bar(ledger, month, total, console, embedded=server is not None),
            logs_above_the_bar(console, verbose=verbose),
        ):
            try:
                monthly_posts(month=month, posts_path=str(path), poll=poll, resubmit=resubmit)
            except InputError as exc:
                console.print(f"[red]error:[/] {exc}")
                return 2
            except RunStopped as exc:
                stopped = str(exc)
    if stopped:
        console.print(f"[red]{stopped}[/]")
    report = status_of(ledger, month)
    ledger.close()
    if report is None:
        return 1
    console.print(status_table(report))
    if (table := failures_table(report)) is not None:
        console.print(table)
    # Plain text: rich's highlighter would colour the month's digits as numbers.
    console.print(_what_this_run_did(before, report), highlight=False)
    console.print(f"ledger: {_shown(settings.resolved_database_url())}", highlight=False)
    console.print(
        f"results: postledger report --month {month}  (posts and a summary, as files)",
        highlight=False,
    )
    return 0 if report["unfinished"] == 0 and not stopped else 1


def _what_this_run_did(before: dict[str, Any] | None, after: dict[str, Any]) -> str:
    """What changed in the month's ledger during this run, in one line."""
    ended = {k: after[k] - (before or {}).get(k, 0) for k in ("completed", "failed")}
    left = after["unfinished"]
    if not any(ended.values()):
        if left == 0:
            return "this run: nothing was sent, nothing was left to do"
        return f"this run: nothing was finished; {left} posts are left"
    tail = "nothing is left" if left == 0 else f"{left} posts are left"
    return f"this run: {ended['completed']} completed, {ended['failed']} failed; {tail}"


def _shown(url: str) -> str:
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


class _ProgressLines:
    """Where there is no live bar: a plain line each tenth of the month ended, and at least
    every `EVERY` seconds while nothing does."""

    EVERY = 30.0

    def __init__(self, month: str, total: int, console: Console) -> None:
        self._month, self._total, self._console = month, total, console
        self._started = self._last = time.monotonic()
        self._step = max(1, total // 10)
        self._ended_then = 0

    def maybe_print(self, report: dict[str, Any] | None) -> None:
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
                f"running, {elapsed}"
            )
        self._console.print(line, highlight=False)


@contextmanager
def _progress_bar(
    ledger: Ledger, month: str, total: int, console: Console, *, embedded: bool
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
    lines = None if console.is_terminal else _ProgressLines(month, total, console)

    def refresh() -> None:
        while not stop.wait(0.5):
            report = progress_of(ledger, month)  # light: this runs beside the batches
            if lines is not None:
                lines.maybe_print(report)
            if report is None:
                continue
            detail = (
                f"{report['completed']} completed, {report['failed']} failed, "
                f"{report['counts']['running']} running"
            )
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
