"""`postledger`: run a month, look at it, prepare the machine, make sample data, simulate.

Commands that need Prefect import it when they run, so `status` and `sim` start fast and the
core stays importable without it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from postledger.posts import InputError, parse_month
from postledger.settings import Settings

app = typer.Typer(
    help="Send a month of posts to a paid AI service in batches, with a ledger that never loses "
    "track of what was sent, paid for, or finished.",
    no_args_is_help=True,
    add_completion=False,
)
sim_app = typer.Typer(help="The bundled upstream simulator (a stand-in for the paid AI).")
app.add_typer(sim_app, name="sim")

out = Console()
err = Console(stderr=True)

MonthOption = Annotated[str, typer.Option("--month", "-m", help="The month, as YYYY-MM.")]


def _month(value: str) -> str:
    try:
        return parse_month(value)
    except InputError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None


@app.command()
def run(
    month: MonthOption,
    posts: Annotated[
        Path | None, typer.Option(help="JSONL file of posts; default data/posts/YYYY-MM.jsonl")
    ] = None,
    latency: Annotated[
        float, typer.Option(help="Simulator only: seconds each upstream task takes.")
    ] = 1.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show Prefect's logs.")] = False,
) -> None:
    """Run the monthly flow for MONTH now, in this process (Prefect's local mode).

    With no POSTLEDGER_UPSTREAM_URL set, the bundled simulator is started on a free loopback
    port: no real AI is called and nothing is paid.
    """
    from postledger.runner import run_month

    month = _month(month)
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    code = run_month(month, posts, sim_latency=latency, console=out)
    raise typer.Exit(code)


@app.command()
def status(
    month: MonthOption,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Where MONTH stands, read from the ledger alone (never calls the AI)."""
    from postledger.progress import failures_table, month_status, status_table

    month = _month(month)
    report = month_status(Settings(), month)
    if report is None:
        err.print(
            f"[yellow]The ledger knows nothing of {month} yet.[/] Run: postledger run "
            f"--month {month}"
        )
        raise typer.Exit(1)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        out.print(status_table(report))
        if (table := failures_table(report)) is not None:
            out.print(table)


@app.command()
def retry(
    month: MonthOption,
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", "-k", help="Only failed posts of this kind (repeatable)."),
    ] = None,
) -> None:
    """A person's decision: plan MONTH's failed posts again (all, or of --kind); the next
    `postledger run` sends them. Sending again may be charged again."""
    from postledger.ledger import Ledger
    from postledger.models import FailureKind

    month = _month(month)
    try:
        kinds = {FailureKind(k) for k in kind} if kind else None
    except ValueError:
        known = ", ".join(k.value for k in FailureKind)
        err.print(f"[red]error:[/] unknown kind in {kind}; known kinds: {known}")
        raise typer.Exit(2) from None
    ledger = Ledger(Settings().resolved_database_url())
    count = ledger.retry_failed(month, kinds)
    ledger.close()
    out.print(f"{count} failed posts of {month} will be sent again by the next run.")


@app.command()
def setup(
    tag_limit: Annotated[int, typer.Option(help="Batches in flight across all runs.")] = 2,
) -> None:
    """Prepare this machine: create the ledger and Prefect's `ai-batch` tag limit (idempotent)."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from flows.limits import ensure_tag_limit
    from postledger.ledger import Ledger

    settings = Settings()
    url = settings.resolved_database_url()
    Ledger(url).close()
    out.print(f"ledger ready: {_safe_url(url)}")
    limit = ensure_tag_limit(tag_limit)
    note = "" if limit == tag_limit else f" (left as it was; asked for {tag_limit})"
    out.print(f"Prefect tag limit tag:ai-batch = {limit}{note}")


@app.command()
def sample(
    month: MonthOption,
    count: Annotated[int, typer.Option(help="How many posts.")] = 300,
    seed: Annotated[int, typer.Option(help="Same seed, same file.")] = 7,
    out_path: Annotated[
        Path | None, typer.Option("--out", help="Default: data/posts/YYYY-MM.jsonl")
    ] = None,
) -> None:
    """Write a deterministic, realistic sample month of posts."""
    from postledger.sample import generate_posts, write_posts

    month = _month(month)
    path = out_path or Settings().data_dir / f"{month}.jsonl"
    write_posts(path, generate_posts(month, count, seed))
    out.print(f"wrote {count} posts to {path}")


@sim_app.command("serve")
def sim_serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 8780,
    latency: Annotated[float, typer.Option(help="Seconds each task takes.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of task ids (and faults).")] = 0,
    create_delay: Annotated[
        float, typer.Option(help="Hold each create's answer this long after charging it.")
    ] = 0.0,
    faults: Annotated[
        str | None,
        typer.Option(help="Faults to inject, e.g. 'create:http_503@0.05,output:bad_field#3'."),
    ] = None,
    scenario: Annotated[
        Path | None, typer.Option(help="A JSON fault plan: {seed, rules: [...]}.")
    ] = None,
) -> None:
    """Serve the simulated task API until Ctrl-C. POSTLEDGER_SIM_API_KEY, if set, is required
    as the Bearer token. Faults (see postledger/sim/faults.py) can also be changed at run time
    with POST /_sim/faults."""
    from pydantic import ValidationError

    from postledger.sim.faults import load_plan
    from postledger.sim.server import serve

    try:
        plan = load_plan(faults, scenario, seed)
    except (ValidationError, ValueError, OSError) as exc:
        err.print(f"[red]error:[/] bad fault plan: {exc}")
        raise typer.Exit(2) from None

    serve(
        host,
        port,
        latency=latency,
        seed=seed,
        api_key=os.environ.get("POSTLEDGER_SIM_API_KEY"),
        create_delay=create_delay,
        faults=plan,
    )


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
