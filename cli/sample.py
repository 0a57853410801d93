"""`postledger sample`: a month of made-up posts to run, the same for the same seed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.shared import MonthOption, checked_month, err, load_settings, out


def sample(
    month: MonthOption,
    count: Annotated[int, typer.Option(help="How many posts.")] = 300,
    seed: Annotated[int, typer.Option(help="Same seed, same file.")] = 7,
    out_path: Annotated[
        Path | None, typer.Option("--out", help="Default: data/posts/YYYY-MM.jsonl")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the file if it exists already.")
    ] = False,
) -> None:
    """Write a deterministic, realistic sample month of posts."""
    from simulator.sample import generate_posts, write_posts

    month = checked_month(month)
    path = out_path or load_settings().data_dir / f"{month}.jsonl"
    if path.exists() and not force:
        # A month's posts file may be real data: never replaced without being asked.
        err.print(
            f"[red]error:[/] {path} exists already. Give another --out, or add --force to "
            "replace it."
        )
        raise typer.Exit(1)
    write_posts(path, generate_posts(month, count, seed))
    out.print(f"wrote {count} posts to {path}")
