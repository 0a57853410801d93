"""`postledger sim`: the bundled upstream simulator, served on its own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from cli.shared import err

sim_app = typer.Typer(
    help="The bundled upstream simulator (a stand-in for the paid AI).", rich_markup_mode=None
)


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
    ignore_idempotency_keys: Annotated[
        bool,
        typer.Option(
            "--ignore-idempotency-keys",
            help="Act like an upstream without idempotency: every create is a new, paid task.",
        ),
    ] = False,
) -> None:
    """Serve the simulated task API until Ctrl-C. POSTLEDGER_SIM_API_KEY, if set, is required
    as the Bearer token. Faults (see simulator/faults.py) can also be changed at run time
    with POST /_sim/faults."""
    from pydantic import ValidationError

    from simulator.faults import load_plan
    from simulator.server import serve

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
        honour_keys=not ignore_idempotency_keys,
    )
