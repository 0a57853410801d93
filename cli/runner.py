"""`postledger run`: the monthly flow in this process, with the simulator when no upstream is
configured, a live progress bar fed from the ledger, and a summary at the end.

The local Prefect server is started as soon as the input is known to be good, before anything
heavy is imported here: it needs ~4 s of its own to start, and this process's imports
(SQLAlchemy, the view, Prefect) are made while it does; then the simulator."""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from postledger.analysis import AnalysisError
from postledger.batches.posts import InputError, check_posts, default_posts_path
from postledger.defaults import BUNDLED_SIMULATOR
from postledger.settings import Settings
from processes.memory import fewer_malloc_arenas
from simulator.child import StartingSimulator, starting_simulator


def run_month(
    month: str,
    posts_path: Path | None,
    *,
    sim_latency: float,
    console: Console,
    verbose: bool = False,
    poll: bool | None = None,
    resubmit: bool | None = None,
    analysis: str | None = None,
) -> int:
    """Returns the exit code: 0 when every post ended (completed or failed), 1 otherwise."""
    fewer_malloc_arenas()  # before any thread: a month's run holds hours of many threads
    settings = Settings()
    if analysis:
        settings = settings.model_copy(update={"analysis": analysis})
    path = posts_path or default_posts_path(settings.data_dir, month)
    try:
        total = check_posts(path).count  # fail fast, before Prefect starts, with the same message
        settings.analysis_in_use()  # and so does a bad analysis
    except (InputError, AnalysisError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
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
        bundled = not settings.upstream_url
        if bundled:
            console.print(
                "[yellow]No upstream configured (POSTLEDGER_UPSTREAM_URL): using the bundled "
                "simulator. No real AI is called and nothing is paid.[/]"
            )
        # Imported while the server starts (~4 s): the environment already points Prefect at
        # it.
        from cli.run_logs import logs_above_the_bar
        from cli.run_view import progress_bar
        from flows.monthly import RunStopped, monthly_posts
        from flows.stop_request import stopping_on_signals
        from postledger.ledger import Ledger
        from postledger.progress.status import status_of
        from postledger.record.rows import last_event, posts_ended_since
        from postledger.upstreams import base_url_of

        # The simulator after those imports, still well before the server answers: started
        # beside them, the three processes shared two cores and the server, which every step
        # waits for, got less than one (first paid call ~0.6 s later).
        simulator = _start_bundled_simulator(running, sim_latency) if bundled else None
        # The ledger opened (a new one migrated, ~0.7 s) while the children start.
        ledger = Ledger(settings.resolved_database_url(), busy_timeout=settings.sqlite_busy_timeout)
        with ledger.plain() as reader:
            first_event = last_event(reader, month)  # what this run does comes after it
        url = settings.upstream_url
        if simulator is not None:  # it speaks every kind, each at its usual base URL
            url = base_url_of(settings.upstream_kind, simulator.wait_ready())
        os.environ["POSTLEDGER_UPSTREAM_URL"] = str(url)
        if server is not None:
            server.wait_ready()
            server.on_unexpected_exit(lambda code: _without_its_server(console, month, code))
        stopped: str | None = None
        with (
            progress_bar(ledger, month, total, console, settings, embedded=server is not None),
            logs_above_the_bar(console, verbose=verbose),
            stopping_on_signals(lambda words: console.print(f"[yellow]{words}[/]")),
        ):
            try:
                monthly_posts(
                    month=month,
                    posts_path=str(path),
                    poll=poll,
                    resubmit=resubmit,
                    analysis=analysis,
                )
            except InputError as exc:
                console.print(f"[red]error:[/] {exc}")
                return 2
            except RunStopped as exc:
                stopped = str(exc)
    if stopped:
        console.print(f"[red]{stopped}[/]")
    report = status_of(ledger, month)
    with ledger.plain() as reader:
        ended = posts_ended_since(reader, month, first_event)
    ledger.close()
    if report is None:
        return 1
    _say_how_it_ended(console, month, ended, report, settings)
    return 0 if report["unfinished"] == 0 and not stopped else 1


def _start_bundled_simulator(running: ExitStack, sim_latency: float) -> StartingSimulator:
    """The bundled simulator, starting for this run (`wait_ready` gives its address)."""
    simulator = running.enter_context(starting_simulator(latency=sim_latency))
    # One name for every run's simulator, whatever its port: its breaker persists (R18).
    os.environ.setdefault("POSTLEDGER_UPSTREAM_NAME", BUNDLED_SIMULATOR)
    # The bundled simulator honours idempotency keys, as the task API kind may not.
    os.environ.setdefault("POSTLEDGER_UPSTREAM_IDEMPOTENT", "true")
    return simulator


def _say_how_it_ended(
    console: Console,
    month: str,
    ended: dict[str, int],
    report: dict[str, Any],
    settings: Settings,
) -> None:
    """The month's table, its failures, what this run did, and where the results are."""
    from cli.run_view import shown, what_this_run_did
    from postledger.progress.tables import failures_table, status_table

    console.print(status_table(report))
    if (table := failures_table(report)) is not None:
        console.print(table)
    # Plain text: rich's highlighter would colour the month's digits as numbers.
    console.print(what_this_run_did(ended, report), highlight=False)
    console.print(f"ledger: {shown(settings.resolved_database_url())}", highlight=False)
    console.print(
        f"results: postledger report --month {month}  (posts and a summary, as files)",
        highlight=False,
    )


def _without_its_server(console: Console, month: str, code: int) -> None:
    """The local server died under the run: without it the run can neither go on nor report
    its end (it would retry for a minute), so it ends now, as a crash would. What it had in
    flight is in the ledger, `running`, for the next run to look at before it sends anything."""
    console.print(
        f"[red]Prefect's local server stopped unexpectedly (exit code {code}); this run cannot "
        "go on without it and stops now. Batches in flight are left to the next run, which "
        f"looks at them before sending anything: postledger run --month {month}[/]"
    )
    os._exit(1)
