"""What the month costs: prices, estimates and the cost of a usage — all integers.

Money is an integer number of micro-units (millionths of the currency unit: 1 000 000 = $1
when prices are in dollars), so sums are exact and never drift as floats do. A price is given
per million tokens, in micro-units: `{"input": 150000, "output": 600000}` is $0.15 / $0.60;
a usage is counted by class of token (`postledger.guards.usage`), each at its own rate.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from postledger.defaults import Price
from postledger.guards.usage import Usage

# ~4 characters per token in English; fewer in other scripts, so this errs on the low side
# for them: the estimate guards the budget, the upstream's usage settles the cost.
CHARS_PER_TOKEN = 4
# What one post's answer to the built-in analysis (id, category, sentiment, one sentence)
# takes, in output tokens; used for any analysis until the estimate learns from the ledger.
OUTPUT_TOKENS_PER_POST = 60
PER_MILLION = 1_000_000


def tokens_of(text_chars: int) -> int:
    return -(-text_chars // CHARS_PER_TOKEN)  # ceiling division


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


def estimate(price: Price, prompt: str, texts: Sequence[str]) -> int:
    """A batch's cost before it is sent: its input, and a typical answer per post. The
    instructions are priced as a cache write where that costs more than fresh input (an
    Anthropic request marks them for the cache): the estimate guards the budget, and must
    not fall short of the first batch that writes them."""
    # Rounded up per text, as tokenizers count: the estimate should not fall short.
    instructions = tokens_of(len(prompt))
    posts = sum(tokens_of(len(t)) for t in texts)
    output = OUTPUT_TOKENS_PER_POST * len(texts)
    if price.cache_write_rate() > price.input:
        return cost_of(price, Usage(posts, output, cache_write=instructions))
    return cost_of(price, Usage(instructions + posts, output))


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
