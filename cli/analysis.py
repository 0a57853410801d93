"""`postledger analysis`: read an analysis as a run would, and show what each post will be
asked (its fields, their kinds and bounds) or every problem in it, before anything is sent."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from cli.shared import err, load_settings, out


def analysis(
    reference: Annotated[
        str | None,
        typer.Argument(
            help="A JSON Schema file (examples/support_triage.json) or a pydantic model "
            "(module:Model, file.py:Model). Default: POSTLEDGER_ANALYSIS, else the built-in one."
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the JSON Schema of one post's answer, as the requests carry it."
        ),
    ] = False,
) -> None:
    """Check an analysis and show what each post will be asked, without a ledger or a call.

    The same reading and the same checks as `postledger run --analysis`: a bad analysis is
    said with its file or model, the field and what to do (exit 2). See docs/analysis.md.
    """
    from postledger.analysis import AnalysisError, fields_version, load_analysis

    settings = load_settings()
    try:
        asked = load_analysis(reference or settings.analysis, instructions=settings.prompt)
    except AnalysisError as exc:
        # Each problem on its own line, whatever the terminal's width: a path is never broken.
        err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(json.dumps(asked.item_schema(), indent=2, ensure_ascii=False) + "\n")
        return
    table = Table(title=f"the analysis {asked.name} (version {fields_version(asked)})")
    for column in ("field", "kind", "answers", "description"):
        table.add_column(column, overflow="fold")
    for field in asked.fields:
        table.add_row(field.name, field.kind.value, _answers(field), field.description)
    out.print(table)
    out.print(f"instructions: {escape(asked.instructions)}", highlight=False)


def _answers(field: Any) -> str:
    """What a field's answer may be, in a few words."""
    from postledger.analysis import FieldKind

    kind = field.kind
    if kind is FieldKind.ENUM:
        return " | ".join(field.values)
    if kind is FieldKind.TEXT:
        return f"text, {field.min_length}..{field.max_length} characters"
    if kind is FieldKind.INTEGER:
        return f"a whole number, {field.minimum}..{field.maximum}"
    if kind is FieldKind.BOOLEAN:
        return "true | false"
    repeats = "" if field.unique else ", values may repeat"
    return f"{field.min_items}..{field.most} of " + " | ".join(field.values) + repeats
