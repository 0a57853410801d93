"""What every `postledger` command shares: its two consoles, the --month option, the month read
from it, and the configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from postledger.batches.posts import InputError, parse_month

if TYPE_CHECKING:
    from postledger.settings import Settings

out = Console()
err = Console(stderr=True)

MonthOption = Annotated[str, typer.Option("--month", "-m", help="The month, as YYYY-MM.")]


def load_settings() -> Settings:
    """The configuration, read when a command runs."""
    # Imported here: `--help` and a mistyped command answer without it (pydantic-settings and
    # SQLAlchemy are most of a read command's start).
    from postledger.settings import Settings

    return Settings()


def checked_month(value: str) -> str:
    """The --month given, as YYYY-MM; anything else ends the command (exit 2)."""
    try:
        return parse_month(value)
    except InputError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None


def unknown_month(month: str) -> str:
    """What a command says of a month the ledger knows nothing of."""
    return (
        f"the ledger knows nothing of {month}: no run of it has started here. (Another month? "
        f"`postledger status --month {month}` says what the ledger has.) To start it: "
        f"postledger run --month {month}"
    )
