"""The budget's per-batch estimate, learned from confirmed sends: the assumed constants with
nothing to learn from, and, once learned, on the safe side of what the sends showed."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from postledger.defaults import Price
from postledger.guards.estimates import (
    ASSUMED,
    HEADROOM,
    QUANTILE_FROM,
    EstimateRates,
    Pricing,
    Sample,
    estimate,
    safe_rates,
    tokens_of,
)
from postledger.guards.spend import cost_of
from postledger.guards.usage import Usage

PRICE = Price(input=150_000, output=600_000)

samples = st.lists(
    st.builds(
        Sample,
        input_tokens=st.integers(1, 50_000),
        output_tokens=st.integers(0, 20_000),
        asked_chars=st.integers(1, 200_000),
        asked_posts=st.integers(1, 100),
    ),
    max_size=120,
)


def test_with_nothing_to_learn_from_the_rates_are_the_assumed_ones() -> None:
    assert safe_rates([]) == ASSUMED
    # A send whose usage told no input, or that asked nothing, teaches nothing.
    assert safe_rates([Sample(0, 10, 100, 1), Sample(10, 10, 0, 1), Sample(10, 10, 10, 0)]) == (
        ASSUMED
    )
    assert ASSUMED.learned_from == 0


def test_the_assumed_rates_estimate_as_the_constants_always_did() -> None:
    """Four characters a token, rounded up per text; 60 output tokens a post."""
    texts = ["a" * 9, "b" * 4, "c"]
    expected = cost_of(PRICE, Usage(tokens_of(7) + 3 + 1 + 1, 60 * 3))
    assert estimate(PRICE, "p" * 7, texts) == expected
    assert Pricing("m", "task_api", PRICE, "p" * 7).estimate(texts) == expected
    assert Pricing("m", "task_api", None, "p").estimate(texts) is None


def test_learned_rates_are_what_the_sends_showed_plus_headroom() -> None:
    """A model that answers 150 tokens a post (not the assumed 60) and reads 1 token in 3
    characters (not 4) is estimated at those, with a fifth on top."""
    seen = [Sample(input_tokens=1_000, output_tokens=3_000, asked_chars=3_000, asked_posts=20)] * 5
    rates = safe_rates(seen)
    assert rates.output_per_post == 150 * HEADROOM
    assert rates.input_per_char == Fraction(1, 3) * HEADROOM
    assert rates.learned_from == 5
    priced = Pricing("m", "task_api", PRICE, "p" * 300, rates)
    texts = ["x" * 135] * 20  # the sends' own size: 300 + 20 * 135 = 3 000 characters
    actual = cost_of(PRICE, Usage(1_000, 3_000))
    assert (priced.estimate(texts) or 0) >= actual * 6 // 5
    assert estimate(PRICE, "p" * 300, texts) < actual  # the constants fell short of it


def test_with_few_sends_the_highest_is_taken_with_many_the_high_quantile() -> None:
    few = [Sample(100, 10 * n, 1_000, 1) for n in range(1, QUANTILE_FROM)]
    assert safe_rates(few).output_per_post == 10 * (QUANTILE_FROM - 1) * HEADROOM
    many = [Sample(100, n, 1_000, 1) for n in range(1, 101)] + [Sample(100, 10**6, 1_000, 1)]
    # One outlier among 101 does not set the rate: the 95th percentile does (nearest rank).
    assert safe_rates(many).output_per_post == 96 * HEADROOM


def _over(rate: Fraction, ratios: list[Fraction]) -> int:
    return sum(1 for ratio in ratios if ratio > rate)


@given(samples)
def test_the_learned_rates_cover_all_but_a_twentieth_of_the_sends_they_came_from(
    seen: list[Sample],
) -> None:
    """Each rate is at least what 95 % of the sends showed (all of them, when there are
    fewer than 20), before the headroom: the estimate errs high, and short only rarely."""
    rates = safe_rates(seen)
    if not seen:
        assert rates == ASSUMED
        return
    per_char = [Fraction(s.input_tokens, s.asked_chars) for s in seen]
    per_post = [Fraction(s.output_tokens, s.asked_posts) for s in seen]
    allowed = 0 if len(seen) < QUANTILE_FROM else len(seen) // 20
    assert _over(rates.input_per_char / HEADROOM, per_char) <= allowed
    assert _over(rates.output_per_post / HEADROOM, per_post) <= allowed
    assert rates.learned_from == len(seen)


@given(samples, st.lists(st.integers(0, 2_000), min_size=1, max_size=30))
def test_an_estimate_at_learned_rates_covers_a_send_at_those_rates(
    seen: list[Sample], lengths: list[int]
) -> None:
    """A send whose tokens are at the learned rates (before headroom) never costs more than
    its estimate: the estimate rounds up, never down."""
    rates = safe_rates(seen)
    base = EstimateRates(
        rates.input_per_char / HEADROOM, rates.output_per_post / HEADROOM, rates.learned_from
    )
    texts = ["x" * n for n in lengths]
    prompt = "instructions " * 20
    chars = len(prompt) + sum(lengths)
    used = Usage(int(base.input_per_char * chars), int(base.output_per_post * len(texts)))
    assert estimate(PRICE, prompt, texts, rates) >= cost_of(PRICE, used)
