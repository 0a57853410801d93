"""The simulator's prompt cache (`simulator.caching`) with the time passed in, never slept: an
entry lives 300 s after its last use, a hit is a use; a short prefix is never cached; OpenAI
reads in 128-token steps from 1024, Anthropic writes then reads the whole marked prefix; and
the simulator's cost of one request (`simulator.billing`), rounded up once."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from simulator.billing import BATCH_DISCOUNT, Usage, request_cost
from simulator.caching import (
    LIFETIME,
    CacheUse,
    Prefix,
    PromptCache,
    anthropic_prefix,
    cache_use,
    openai_read,
)
from simulator.model import count_tokens

MODEL = "sim-analyst-1"
LONG = "You analyse customer posts. " * 200  # 5600 characters: 1400 tokens
SHORT = "Analyse the posts."


def test_an_entry_unused_for_its_lifetime_is_gone() -> None:
    cache = PromptCache()
    assert LIFETIME == 300.0
    assert not cache.use(MODEL, LONG, now=1000.0)  # a miss records it
    assert cache.holds(MODEL, LONG, now=1299.9)
    assert not cache.holds(MODEL, LONG, now=1300.0)
    assert not cache.use(MODEL, LONG, now=1300.0)  # gone: a miss again, recorded anew
    assert cache.use(MODEL, LONG, now=1599.0)


def test_an_entry_used_before_it_expires_lives_on_from_that_use() -> None:
    cache = PromptCache()
    cache.use(MODEL, LONG, now=0.0)
    assert cache.use(MODEL, LONG, now=299.0)  # a hit, and a use: it lives 300 s from here
    assert cache.holds(MODEL, LONG, now=598.9)
    assert cache.use(MODEL, LONG, now=598.0)
    assert not cache.holds(MODEL, LONG, now=898.0)


def test_entries_are_by_model_and_prefix_and_a_clear_forgets_them() -> None:
    cache = PromptCache()
    cache.use(MODEL, LONG, now=0.0)
    assert not cache.holds("another-model", LONG, now=1.0)
    assert not cache.holds(MODEL, LONG + ".", now=1.0)
    cache.clear()
    assert not cache.holds(MODEL, LONG, now=1.0)


@pytest.mark.parametrize(
    ("tokens", "read"),
    [(1024, 1024), (1151, 1024), (1152, 1152), (1400, 1280), (5000, 4992)],
)
def test_openai_reads_1024_tokens_then_whole_128_token_steps(tokens: int, read: int) -> None:
    assert openai_read(tokens) == read <= tokens


def test_an_openai_prefix_is_recorded_free_then_read() -> None:
    cache, prefix = PromptCache(), Prefix(LONG)
    assert count_tokens(LONG) == 1400
    assert cache_use(cache, MODEL, prefix, now=0.0) == CacheUse()
    assert cache_use(cache, MODEL, prefix, now=1.0) == CacheUse(read=1280)


def test_an_anthropic_marked_prefix_is_written_then_read_whole() -> None:
    cache, prefix = PromptCache(), Prefix(LONG, marked=True)
    assert cache_use(cache, MODEL, prefix, now=0.0) == CacheUse(written=1400)
    assert cache_use(cache, MODEL, prefix, now=1.0) == CacheUse(read=1400)
    assert cache_use(cache, MODEL, prefix, now=301.0) == CacheUse(written=1400)


@pytest.mark.parametrize("marked", [False, True])
def test_a_prefix_under_1024_tokens_is_never_cached(marked: bool) -> None:
    cache, just_short = PromptCache(), "x" * (4 * 1023)
    assert count_tokens(just_short) == 1023
    for now in (0.0, 1.0, 2.0):
        assert cache_use(cache, MODEL, Prefix(just_short, marked), now) == CacheUse()
        assert cache_use(cache, MODEL, None, now) == CacheUse()
    assert not cache.holds(MODEL, just_short, now=2.0)


def test_the_anthropic_prefix_runs_to_the_last_marked_system_block() -> None:
    ephemeral = {"type": "ephemeral"}
    system = [
        {"type": "text", "text": "A"},
        {"type": "text", "text": "B", "cache_control": ephemeral},
        {"type": "text", "text": "C", "cache_control": {**ephemeral, "ttl": "1h"}},
        {"type": "text", "text": "D"},
    ]
    assert anthropic_prefix(system) == Prefix("ABC", marked=True)
    assert anthropic_prefix(system[:2]) == Prefix("AB", marked=True)
    assert anthropic_prefix([system[0], system[3]]) is None  # nothing marked
    assert anthropic_prefix("A plain system string") is None
    assert anthropic_prefix(None) is None


def expected_cost(usage: Usage, discount: int) -> int:
    """Worked out apart: exact fractions, then rounded up."""
    listed = Fraction(
        usage.input_tokens * 150_000
        + usage.cached_input_tokens * 15_000
        + usage.cache_write_tokens * 187_500
        + usage.output_tokens * 600_000,
        1_000_000,
    )
    return math.ceil(listed * Fraction(100 - discount, 100))


@pytest.mark.parametrize(
    "usage",
    [
        Usage(0, 0),
        Usage(1, 0),
        Usage(1400, 57),
        Usage(120, 57, cached_input_tokens=1280),
        Usage(120, 57, cache_write_tokens=1400),
        Usage(7, 3, cached_input_tokens=1111, cache_write_tokens=1),
    ],
)
@pytest.mark.parametrize("discount", [0, BATCH_DISCOUNT])
def test_one_request_costs_its_tokens_at_their_rates_rounded_up_once(
    usage: Usage, discount: int
) -> None:
    assert request_cost(MODEL, usage, discount) == expected_cost(usage, discount)


def test_a_single_token_costs_a_whole_micro_unit_even_at_half_price() -> None:
    # 1 token at 15 000 per million is 0.015 micro-units; halved, still rounded up to 1.
    assert request_cost(MODEL, Usage(0, 0, cached_input_tokens=1), BATCH_DISCOUNT) == 1
