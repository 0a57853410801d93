"""What the month costs: prices, estimates and the cost of a usage — all integers.

Money is an integer number of micro-units (millionths of the currency unit: 1 000 000 = $1
when prices are in dollars), so sums are exact and never drift as floats do. A price is given
per million tokens, in micro-units: `{"input": 150000, "output": 600000}` is $0.15 / $0.60.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from postledger.defaults import Price

# ~4 characters per token in English; fewer in other scripts, so this errs on the low side
# for them: the estimate guards the budget, the upstream's usage settles the cost.
CHARS_PER_TOKEN = 4
# What one post's answer to the built-in analysis (id, category, sentiment, one sentence)
# takes, in output tokens; used for any analysis until the estimate learns from the ledger.
OUTPUT_TOKENS_PER_POST = 60
PER_MILLION = 1_000_000


def tokens_of(text_chars: int) -> int:
    return -(-text_chars // CHARS_PER_TOKEN)  # ceiling division


def cost_of(price: Price, input_tokens: int, output_tokens: int) -> int:
    """The cost of a usage, rounded up to the micro-unit (never in the payer's favour)."""
    return -(-(input_tokens * price.input + output_tokens * price.output) // PER_MILLION)


def estimate(price: Price, prompt: str, texts: Sequence[str]) -> int:
    """A batch's cost before it is sent: its input, and a typical answer per post."""
    # Rounded up per text, as tokenizers count: the estimate should not fall short.
    input_tokens = tokens_of(len(prompt)) + sum(tokens_of(len(t)) for t in texts)
    return cost_of(price, input_tokens, OUTPUT_TOKENS_PER_POST * len(texts))


def usage_tokens(usage: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(input, output) tokens from an upstream's usage, in the names services use."""
    if not usage:
        return None
    try:
        input_tokens = int(usage.get("input_tokens", usage.get("prompt_tokens")))
        output_tokens = int(usage.get("output_tokens", usage.get("completion_tokens")))
    except (TypeError, ValueError):
        return None
    if input_tokens < 0 or output_tokens < 0:  # not a usage: the cost is left to the estimate
        return None
    return input_tokens, output_tokens


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
