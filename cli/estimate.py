"""`postledger estimate`: what a month will cost and how long it will take, before it is sent."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from cli.shared import MonthOption, checked_month, err, load_settings, out

if TYPE_CHECKING:
    from postledger.record.plain import Reader


def estimate(
    month: MonthOption,
    posts: Annotated[
        Path | None,
        typer.Option(help="JSONL file of posts; default data/posts/YYYY-MM.jsonl if it exists"),
    ] = None,
    analysis: Annotated[
        str | None,
        typer.Option(help="What each post is asked (as `postledger run --analysis`)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Forecast MONTH before paying for it: the posts and batches left to send, their tokens,
    the cost on the configured kind and on the same provider's other way in (chat or Batch
    API, with its discount), the time it should take, and the budget.

    Reads the posts file and the ledger only: it never calls the AI. Posts the ledger has
    already sent or finished are not counted again. Token counts are learned from the
    answers the ledger has confirmed; with none yet, it says what it assumed.
    """
    from postledger.analysis import AnalysisError
    from postledger.batches.posts import InputError, default_posts_path
    from postledger.progress.forecast import month_forecast
    from postledger.progress.forecast_words import forecast_lines
    from postledger.record.plain import read_only

    month = checked_month(month)
    settings = load_settings()
    if analysis:
        settings = settings.model_copy(update={"analysis": analysis})
    path = posts or default_posts_path(settings.data_dir, month)
    try:
        settings.analysis_in_use()
        with read_only(settings.resolved_database_url(create_folder=False)) as reader:
            sizes = _sizes(reader, month, path if posts or path.is_file() else None)
            forecast = month_forecast(reader, month, settings, sizes)
    except (InputError, AnalysisError) as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(json.dumps(forecast.summary(), indent=2) + "\n")
        return
    for line in forecast_lines(forecast):
        out.print(escape(line), soft_wrap=True, highlight=False)


def _sizes(reader: Reader | None, month: str, path: Path | None) -> Iterator[tuple[str, int]]:
    """The posts still to send (id, characters): the file's, less those the ledger has sent
    or finished; with no file, the ledger's."""
    from postledger.batches.posts import check_posts, read_posts
    from postledger.record.history import left_sizes, post_states

    if path is None:
        yield from left_sizes(reader, month) if reader is not None else []
        return
    checked = check_posts(path)  # every bad line said, before anything is counted
    known = post_states(reader, month) if reader is not None else {}
    for post in read_posts(checked):
        if known.get(post.id, True):
            yield post.id, len(post.text)
