"""A month's rows as a Parquet file (`postledger report --parquet`), for those who load them into
a dataframe. pyarrow is an optional extra: imported here only, and only when asked for, so that
every other command starts without it.

Each column gets one type: money as exact decimals (6 places) and as integer micro-units; the
answer's fields as the analysis types them (an enum or a text as text, an integer as int64, a
boolean as bool, a list of enum values as a list of text); the input's own fields as what they
hold when every post agrees (text, whole numbers, numbers, true/false), else as text the way
the CSV writes them (lists and objects as JSON).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from postledger.analysis import AnswerField, FieldKind
from postledger.errors import PostledgerError
from postledger.progress.month_table import MICRO, MonthTable, csv_cell

INT64 = (-(2**63), 2**63 - 1)
INSTALL = "`uv sync --extra parquet` (or `pip install 'postledger[parquet]'`)"


class MissingPyarrow(PostledgerError):
    """Parquet was asked for, and pyarrow is not installed."""

    def __init__(self) -> None:
        super().__init__(f"writing Parquet needs pyarrow, which is not installed: {INSTALL}")


def writer() -> Callable[[MonthTable, Path], Path]:
    """`write_parquet`, once pyarrow is known to be there; raises `MissingPyarrow` if not, so
    that a caller can say so before it writes anything."""
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise MissingPyarrow() from None
    return write_parquet


def write_parquet(table: MonthTable, path: Path) -> Path:
    """The rows as the JSONL has them (same columns, same order), typed per column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns: dict[str, Any] = {}
    for column in table.columns:
        values = [row[column] for row in table.rows]
        if column in MICRO:
            # Exact: micro-units are the decimal's digits, with 6 of them after the point.
            exact = [Decimal(value).scaleb(-6) for value in values]
            columns[column] = pa.array(exact, type=pa.decimal128(38, 6))
        elif column == "attempts":
            columns[column] = pa.array(values, type=pa.int64())
        elif column in table.answers:
            columns[column] = _answer_array(pa, table.answers[column], column, values)
        elif column in table.inputs:
            columns[column] = _input_array(pa, column, values)
        else:
            columns[column] = pa.array(values, type=pa.string())
    for column, micro in MICRO.items():
        columns[micro] = pa.array([row[column] for row in table.rows], type=pa.int64())
    pq.write_table(pa.table(columns), path)
    return path


def _answer_array(pa: Any, field: AnswerField, column: str, values: list[Any]) -> Any:
    """One answer field's values, typed by the field's kind (None where a post has no result).
    A value of another type (the same name in another analysis) makes the column text."""
    types = {
        FieldKind.INTEGER: (pa.int64(), int),
        FieldKind.BOOLEAN: (pa.bool_(), bool),
        FieldKind.ENUM_LIST: (pa.list_(pa.string()), list),
    }
    arrow, python = types.get(field.kind, (pa.string(), str))
    if all(value is None or type(value) is python for value in values):
        return pa.array(values, type=arrow)
    shown = [None if value is None else csv_cell(column, value) for value in values]
    return pa.array(shown, type=pa.string())


def _input_array(pa: Any, column: str, values: list[Any]) -> Any:
    """One input field's values, in the one type they all have, else as the CSV's text."""
    kinds = {type(value) for value in values if value is not None}
    if kinds == {bool}:
        return pa.array(values, type=pa.bool_())
    if kinds == {int} and all(INT64[0] <= v <= INT64[1] for v in values if v is not None):
        return pa.array(values, type=pa.int64())
    if kinds == {float}:
        return pa.array(values, type=pa.float64())
    shown = [None if value is None else csv_cell(column, value) for value in values]
    return pa.array(shown, type=pa.string())
