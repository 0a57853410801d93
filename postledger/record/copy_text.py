"""Rows in PostgreSQL's COPY text format, made a column at a time.

psycopg's `Copy.write_row` adapts each value of each row through its dumpers: for a month's
sync (100 000 posts and their 100 000 events) that was ~2 s of Python, more than the server's
own work. Our columns hold few kinds of values (text, integers, booleans, UTC timestamps, JSON,
NULL), so each value is written here as COPY's text format spells it, and a whole chunk goes
to the server in one write. The format: a tab between fields, a newline after each row, `\\N`
for NULL, and a backslash, tab, newline or carriage return in a value escaped by a backslash.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

NULL = "\\N"


def copy_lines(
    columns: Sequence[Sequence[Any]],
    processors: Sequence[Callable[[Any], Any] | None] | None = None,
) -> str:
    """The rows whose values `columns` holds, column by column, as COPY text: one line per row.
    `processors`: a column's bind processor (or None), applied to each value first, in the
    same pass, so that the value arrives as an INSERT would send it (enum names, JSON)."""
    fields = [
        _column(values, processor)
        for values, processor in zip(columns, processors or [None] * len(columns), strict=True)
    ]
    return "".join(["\t".join(row) + "\n" for row in zip(*fields, strict=True)])


def _column(values: Sequence[Any], processor: Callable[[Any], Any] | None) -> Sequence[Any]:
    """One column's fields. A column of plain strings none of which needs escaping (ids, a
    move's reasons), or of integers, is spelled by one look at the whole column rather than one
    call per value: a month's plan stages 400 000 such values."""
    kinds = set(map(type, values)) if processor is None else set()
    if kinds == {str}:
        whole = "".join(values)
        if not ("\\" in whole or "\t" in whole or "\n" in whole or "\r" in whole):
            return values
    elif kinds == {int}:
        return list(map(str, values))
    return converted(values, _spelled(processor))


def _spelled(processor: Callable[[Any], Any] | None) -> Callable[[Any], str]:
    if processor is None:
        return copy_field
    return lambda value: copy_field(processor(value))


def converted(values: Sequence[Any], convert: Callable[[Any], Any]) -> list[Any]:
    """`convert` of each value; a value that is the same object as the one before it is
    converted once (a bulk write's rows share their None and their timestamp, and each was a
    serialization of its own per row: a JSON null, a UTC datetime, a COPY field). Also what
    `db.execute_many` binds with."""
    out: list[Any] = []
    last: Any = _NOTHING
    done: Any = None
    for value in values:
        if value is not last:
            last, done = value, convert(value)
        out.append(done)
    return out


def copy_field(value: Any) -> str:
    """One value as COPY's text format spells it."""
    if value is None:
        return NULL
    if isinstance(value, str):
        text = str.__str__(value)  # a str enum: its value, as psycopg sends it
    elif isinstance(value, bool):
        return "t" if value else "f"
    elif isinstance(value, int):
        return str(int(value))
    elif isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the ledger: use timezone-aware UTC")
        text = value.isoformat()
    elif hasattr(value, "obj") and hasattr(value, "dumps"):  # psycopg's Json wrapper
        text = (value.dumps or json.dumps)(value.obj)
    else:
        raise TypeError(f"no COPY text for a {type(value).__name__}: write it with an INSERT")
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
        text = text.replace("\r", "\\r")
    return text


_NOTHING = object()
