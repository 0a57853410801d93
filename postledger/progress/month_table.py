"""The report's table of a month, one row per post, and how a cell of it is written: what the
report's writers (JSONL and CSV in `report.py`, Parquet in `parquet.py`) share."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from postledger.analysis import AnswerField
from postledger.guards.spend import money

# Around the answer's own columns (one per field of the analysis): the post's outcome.
STATUS = ("status",)
FAILURE = ("failure_kind", "failure_reason", "attempts")
# Money is shown in the currency the price table (POSTLEDGER_PRICES) is in: the ledger knows
# amounts, not which currency they are, so the header says "currency units", not "usd".
UNIT = "currency_units"
COST, WASTED = f"cost_{UNIT}", f"wasted_{UNIT}"
# JSONL and Parquet also give the amounts as integer micro-units, exact for any tool.
MICRO = {COST: "cost_micro_units", WASTED: "wasted_micro_units"}
TAKEN = {"id", "text", *STATUS, *FAILURE, COST, WASTED, *MICRO.values()}
INPUT_PREFIX = "input_"


@dataclass(frozen=True)
class MonthTable:
    """One row per post, in file order. `columns` in the order written; `inputs` maps the
    columns that hold the input's own fields to the field's name in the input; `answers` the
    columns that hold the answer's fields to the field (its kind types the column). Money
    columns hold integer micro-units; each writer shows them in its own way."""

    columns: list[str]
    inputs: dict[str, str]
    answers: dict[str, AnswerField]
    rows: list[dict[str, Any]]

    def total(self, column: str) -> int:
        return sum(row[column] for row in self.rows)


def csv_cell(column: str, value: Any) -> str:
    """A value as the CSV shows it: money in currency units, exactly; text as it is; other
    values (numbers, true/false, lists, objects) as JSON; nothing as an empty cell."""
    if column in MICRO:
        return money(value)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
