"""`postledger setup`: the ledger and Prefect made ready for runs, idempotently."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.markup import escape

from cli.shared import err, load_settings, out
from postledger.defaults import MAX_IN_FLIGHT


def setup(
    tag_limit: Annotated[
        int, typer.Option(help="Batches in flight across all runs.")
    ] = MAX_IN_FLIGHT,
    work_pool: Annotated[
        str, typer.Option(help="The process work pool prefect.yaml deploys to.")
    ] = "postledger",
    ledger_block: Annotated[
        str | None,
        typer.Option(help="Migrate the ledger this postledger-ledger block names instead."),
    ] = None,
    notify: Annotated[
        str | None,
        typer.Option(
            help="A notification block (type/name, e.g. slack-webhook/ops): a run that pauses "
            "for a person sends its question through it (a Prefect automation)."
        ),
    ] = None,
) -> None:
    """Prepare the ledger and Prefect (idempotent): migrate the ledger to the current schema,
    register the block types, create the `ai-batch` tag limit, the work pool and, with
    --notify, the automation that calls a person when a run pauses."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from contextlib import AbstractContextManager, nullcontext

    from flows.local_server import local_prefect_server
    from postledger.ledger import Ledger
    from postledger.record.db import safe_url

    # The embedded default: the local server `postledger run` starts. Prefect reads
    # PREFECT_API_URL when it is first imported, so nothing imports it before the server is up.
    server: AbstractContextManager[object] = (
        nullcontext() if os.environ.get("PREFECT_API_URL") else local_prefect_server()
    )
    with server:
        from blocks import register_block_types, settings_from_blocks
        from flows.setup import prepare_prefect

        if ledger_block:
            register_block_types()  # so that the block can be loaded on a server never set up
        settings = settings_from_blocks(ledger=ledger_block) if ledger_block else load_settings()
        url = settings.resolved_database_url()
        ledger = Ledger(url, busy_timeout=settings.sqlite_busy_timeout)  # opening migrates
        out.print(f"ledger ready: {safe_url(url)} (schema {ledger.schema_revision()})")
        ledger.close()
        try:
            lines = prepare_prefect(tag_limit, work_pool, notify)
        except ValueError as exc:  # a notification block that is not there
            err.print(f"[red]error:[/] {escape(str(exc))}")
            raise typer.Exit(2) from None
    for line in lines:
        out.print(line)
