"""What the month costs: prices, estimates and the cost of a usage — all integers.

Money is an integer number of micro-units (millionths of the currency unit: 1 000 000 = $1
when prices are in dollars), so sums are exact and never drift as floats do. A price is given
per million tokens, in micro-units: `{"input": 150000, "output": 600000}` is $0.15 / $0.60;
a usage is counted by class of token (`postledger.guards.usage`), each at its own rate.
"""

from __future__ import annotations

import json

from postledger.defaults import Price
from postledger.guards.usage import Usage

PER_MILLION = 1_000_000


def cost_of(price: Price, usage: Usage) -> int:
    """The cost of a usage: each class of token at its rate, less the price's discount,
    rounded up to the micro-unit once (never in the payer's favour)."""
    listed = (
        usage.input * price.input
        + usage.cached_input * price.cached_input_rate()
        + usage.cache_write * price.cache_write_rate()
        + usage.output * price.output
    )
    return -(-listed * (100 - price.discount()) // (100 * PER_MILLION))


def money(micro: int) -> str:
    """Micro-units shown as currency units, exactly (no float)."""
    sign = "-" if micro < 0 else ""
    whole, part = divmod(abs(micro), PER_MILLION)
    return f"{sign}{whole}.{part:06d}"


def unpriced_budget(model: str) -> str:
    """Why a budget cannot be applied to a model with no price, and how to fix it."""
    example = json.dumps({model: {"input": 150_000, "output": 600_000}})
    return (
        "a monthly budget is set (POSTLEDGER_MAX_COST), but the price table has no price for "
        f"the model {model!r}, so the budget could not be applied. Add its price per million "
        f"tokens in micro-units, e.g. POSTLEDGER_PRICES='{example}' ($0.15 / $0.60), or unset "
        "POSTLEDGER_MAX_COST"
    )
