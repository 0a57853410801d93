"""What a send may cost, worked out before it is sent: the budget's guard (R52) and the figure a
possible charge is booked at (R51).

The estimate counts the tokens of what is sent (the instructions and the posts) and of a
typical answer per post, at `EstimateRates`. With no history those are the assumed constants
(about four characters a token, 60 output tokens a post). Once the ledger has confirmed usage of
the model, they are learned from it (`safe_rates`), and kept on the safe side: the estimate
guards the budget, so it may overshoot, and it falls short of a batch's real cost only rarely.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, NamedTuple

from postledger.defaults import Price
from postledger.guards.spend import cost_of
from postledger.guards.usage import Usage
from postledger.record import history

if TYPE_CHECKING:  # the read commands that import the assumed rates start without the settings
    from postledger.record.plain import Reader
    from postledger.settings import Settings

# ~4 characters per token in English; fewer in other scripts, so this errs on the low side for
# them until the rates are learned.
CHARS_PER_TOKEN = 4
# What one post's answer to the built-in analysis (id, category, sentiment, one sentence)
# takes, in output tokens; the assumed rate until one is learned from the ledger.
OUTPUT_TOKENS_PER_POST = 60

# Learned from the model's last confirmed sends, at most this many.
LEARN_FROM = 500
# With at least this many, from the high quantile below; with fewer, from the highest seen.
QUANTILE_FROM = 20
HIGH_QUANTILE = Fraction(95, 100)
# Headroom over what was seen, for the batches that come out higher still.
HEADROOM = Fraction(6, 5)


def tokens_of(text_chars: int) -> int:
    """The tokens of a text at the assumed rate."""
    return -(-text_chars // CHARS_PER_TOKEN)  # ceiling division


class Sample(NamedTuple):
    """One confirmed send: the tokens it used (input of every class, and output) against what it
    asked (the instructions' and the posts' characters, and the posts)."""

    input_tokens: int
    output_tokens: int
    asked_chars: int
    asked_posts: int


@dataclass(frozen=True)
class EstimateRates:
    """Input tokens per character sent, and output tokens per post."""

    input_per_char: Fraction
    output_per_post: Fraction
    learned_from: int  # confirmed sends; 0: the assumed constants

    def input_tokens(self, chars: int) -> int:
        return math.ceil(self.input_per_char * chars)


ASSUMED = EstimateRates(Fraction(1, CHARS_PER_TOKEN), Fraction(OUTPUT_TOKENS_PER_POST), 0)


def safe_rates(samples: Sequence[Sample]) -> EstimateRates:
    """Rates an estimate can stand on, from confirmed sends: each rate at the high end of what
    the sends showed (their 95th percentile, or their highest when there are few), plus a fifth.
    The assumed constants when there is nothing to learn from."""
    usable = [s for s in samples if s.asked_chars > 0 and s.asked_posts > 0 and s.input_tokens]
    if not usable:
        return ASSUMED
    per_char = _high([(s.input_tokens, s.asked_chars) for s in usable])
    per_post = _high([(s.output_tokens, s.asked_posts) for s in usable])
    return EstimateRates(per_char * HEADROOM, per_post * HEADROOM, len(usable))


def learned_rates(reader: Reader, model: str) -> EstimateRates:
    """The rates learned from `model`'s latest confirmed sends in the ledger (`safe_rates`)."""
    seen = history.sends_seen(reader, model, LEARN_FROM)
    return safe_rates([Sample(*row) for row in seen])


def _high(ratios: list[tuple[int, int]]) -> Fraction:
    """The high end of these ratios (numerator, denominator), exactly. Ordered by their float
    values (a Fraction each cost more than the read of the sends): two ratios of token counts
    that close are the same rate for an estimate."""
    ordered = sorted(ratios, key=lambda ratio: ratio[0] / ratio[1])
    if len(ordered) < QUANTILE_FROM:
        return Fraction(*ordered[-1])
    return Fraction(*ordered[math.ceil(HIGH_QUANTILE * len(ordered)) - 1])  # nearest rank


@dataclass(frozen=True)
class Pricing:
    """What a send is priced by: the model asked, on which kind of upstream, its price there
    (None: the table has none), the instructions every batch carries, and the estimate's rates."""

    model: str
    kind: str
    price: Price | None
    prompt: str
    rates: EstimateRates = ASSUMED

    @classmethod
    def of(cls, settings: Settings, rates: EstimateRates = ASSUMED) -> Pricing:
        """The configured model's pricing on the configured kind, at `rates`."""
        prompt = settings.analysis_in_use().request_text
        return cls(settings.model, settings.upstream_kind.value, settings.price(), prompt, rates)

    def estimate(self, texts: Sequence[str]) -> int | None:
        """What one send of these posts may cost (None: no price known)."""
        if self.price is None:
            return None
        return estimate(self.price, self.prompt, texts, self.rates)

    def asked_chars(self, texts: Sequence[str]) -> int:
        """The characters one send of these posts carries: the instructions' and the posts'."""
        return len(self.prompt) + sum(len(text) for text in texts)


def estimate(
    price: Price, prompt: str, texts: Sequence[str], rates: EstimateRates = ASSUMED
) -> int:
    """A batch's cost before it is sent: its input, and a typical answer per post. The
    instructions are priced as a cache write where that costs more than fresh input (an
    Anthropic request marks them for the cache): the estimate must not fall short of the first
    batch that writes them."""
    # Rounded up per text, as tokenizers count: the estimate should not fall short.
    instructions = rates.input_tokens(len(prompt))
    posts = sum(rates.input_tokens(len(text)) for text in texts)
    output = math.ceil(rates.output_per_post * len(texts))
    if price.cache_write_rate() > price.input:
        return cost_of(price, Usage(posts, output, cache_write=instructions))
    return cost_of(price, Usage(instructions + posts, output))
