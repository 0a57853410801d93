"""`postledger run`: the command's options; the run itself is `cli/runner.py`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from cli.shared import MonthOption, checked_month, out


def run(
    month: MonthOption,
    posts: Annotated[
        Path | None, typer.Option(help="JSONL file of posts; default data/posts/YYYY-MM.jsonl")
    ] = None,
    latency: Annotated[
        float, typer.Option(help="Simulator only: seconds each upstream task takes.")
    ] = 1.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show Prefect's logs.")] = False,
    poll: Annotated[
        bool,
        typer.Option(
            "--poll", help="Yes, up front: poll the known tasks of interrupted batches (free)."
        ),
    ] = False,
    resubmit: Annotated[
        bool,
        typer.Option(
            "--resubmit",
            help="Yes, up front: send again interrupted batches with no task id; they may be "
            "charged twice (see `postledger plan`).",
        ),
    ] = False,
    analysis: Annotated[
        str | None,
        typer.Option(
            help="What each post is asked: a JSON Schema file (examples/support_triage.json) "
            "or a pydantic model (module:Model, or file.py:Model); default POSTLEDGER_ANALYSIS, "
            "else the built-in analysis (category, sentiment, summary). See docs/analysis.md.",
        ),
    ] = None,
) -> None:
    """Run the monthly flow for MONTH now, in this process (Prefect's local mode).

    With no POSTLEDGER_UPSTREAM_URL set, the bundled simulator is started on a free loopback
    port: no real AI is called and nothing is paid. Batches an earlier run sent but never saw
    answered are polled or resubmitted only with a yes: --poll / --resubmit given here, or
    asked for in the paused run's form once everything safe is done.
    """
    from cli.runner import run_month

    month = checked_month(month)
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    answers = {"poll": poll, "resubmit": resubmit} if poll or resubmit else {}
    code = run_month(
        month,
        posts,
        sim_latency=latency,
        console=out,
        verbose=verbose,
        analysis=analysis,
        **answers,
    )
    raise typer.Exit(code)
