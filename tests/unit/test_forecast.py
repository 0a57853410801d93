"""The month's forecast (`postledger.progress.forecast`) as rules: the work batched as planning
batches it, tokens from assumed or learned rates, each kind priced with its own discount, the
wall time in rounds of the batches in flight, and the budget compared."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postledger.batches.planning import Sized, plan_batches
from postledger.defaults import DEFAULT_PRICES
from postledger.guards.spend import cost_of
from postledger.guards.usage import Usage
from postledger.progress.forecast import (
    Forecast,
    KindCost,
    TokenRates,
    Work,
    jobs_of,
    wall_seconds,
    work_of,
)
from postledger.progress.forecast_words import forecast_lines
from postledger.record.history import Shortfalls, UsageSeen
from postledger.settings import Settings, UpstreamKind

QUICK = settings(max_examples=100, deadline=None, database=None)


@QUICK
@given(
    st.lists(st.integers(1, 3000), max_size=200),
    st.integers(1, 30),
    st.integers(1, 10_000),
)
def test_the_work_is_batched_as_planning_batches_it(
    lengths: list[int], max_posts: int, max_chars: int
) -> None:
    sizes = [(f"p{n}", length) for n, length in enumerate(lengths)]
    plan = plan_batches([Sized(*size) for size in sizes], max_posts=max_posts, max_chars=max_chars)
    work = work_of(sizes, max_posts=max_posts, max_chars=max_chars)
    assert work.batches == len(plan.batches)
    assert work.too_long == len(plan.too_long)
    assert work.posts == sum(len(batch) for batch in plan.batches)
    assert work.chars == sum(length for length in lengths if length <= max_chars)


def test_with_no_history_the_assumed_constants_are_used() -> None:
    rates = TokenRates.learned(UsageSeen(0, 0, 0, 0, 0, 0, 0), prompt_chars=400)
    assert rates == TokenRates.assumed() and rates.learned_from == 0
    usage = rates.usage(Work(posts=50, chars=10_000, batches=2, too_long=0), prompt_chars=400)
    assert usage == Usage(input=math.ceil((2 * 400 + 10_000) / 4), output=60 * 50)


def test_rates_are_learned_from_confirmed_usage_and_its_cache_shares() -> None:
    # 10 batches of 25 posts: 10 instructions of 400 characters and 50 000 of posts.
    seen = UsageSeen(
        batches=10,
        posts=250,
        post_chars=50_000,
        input_tokens=27_000,
        cached_input_tokens=900,
        cache_write_tokens=100,
        output_tokens=10_000,
    )
    rates = TokenRates.learned(seen, prompt_chars=400)
    assert rates.input_per_char == Fraction(27_000, 54_000)
    assert rates.output_per_post == 40 and rates.learned_from == 10
    usage = rates.usage(Work(posts=25, chars=5_000, batches=1, too_long=0), prompt_chars=400)
    total = 2_700  # (400 + 5 000) / 2
    assert usage.cached_input == math.floor(total * Fraction(900, 27_000))
    assert usage.cache_write == math.floor(total * Fraction(100, 27_000))
    assert usage.input + usage.cached_input + usage.cache_write == total
    assert usage.output == 1_000


@pytest.mark.parametrize("kind", [UpstreamKind.OPENAI_CHAT, UpstreamKind.ANTHROPIC_BATCH])
def test_a_kind_and_its_sibling_are_priced_each_with_its_own_discount(kind: UpstreamKind) -> None:
    priced = Settings(upstream_kind=kind, model="sim-analyst-1")
    usage = Usage(input=1_000_000, output=200_000)
    listed = cost_of(DEFAULT_PRICES["sim-analyst-1"], usage)
    assert kind.sibling is not None
    chat, batch = sorted([kind, kind.sibling], key=lambda each: each.batch_api)
    assert cost_of(priced.price(chat), usage) == listed  # type: ignore[arg-type]
    assert cost_of(priced.price(batch), usage) == listed // 2  # type: ignore[arg-type]
    assert UpstreamKind.TASK_API.sibling is None


def test_the_wall_time_is_rounds_of_the_batches_in_flight_at_the_median_duration() -> None:
    work = Work(posts=100, chars=1, batches=5, too_long=0)
    assert wall_seconds(UpstreamKind.TASK_API, work, [1.0, 2.0, 30.0]) == 3 * 2.0
    assert wall_seconds(UpstreamKind.TASK_API, work, []) is None
    jobs = Work(posts=1, chars=1, batches=120_000, too_long=0)  # 3 OpenAI jobs: 2 rounds
    assert wall_seconds(UpstreamKind.OPENAI_BATCH, jobs, [600.0]) == 1200.0
    assert wall_seconds(UpstreamKind.ANTHROPIC_BATCH, jobs, [600.0]) == 600.0  # 2 jobs


def test_a_batch_api_month_takes_jobs_by_its_requests_and_by_their_bytes() -> None:
    # A million posts of ~300 characters in 40 000 batches, with 1 000 characters of
    # instructions a request: 340 MB, two OpenAI files of 200 MB (not one, as the
    # 50 000-request limit alone would say) and two Anthropic Message Batches of 256 MB.
    month = Work(posts=1_000_000, chars=300_000_000, batches=40_000, too_long=0)
    assert jobs_of("openai_batch", month, prompt_chars=1_000) == 2
    assert jobs_of("anthropic_batch", month, prompt_chars=1_000) == 2
    bigger = Work(posts=1_000_000, chars=440_000_000, batches=40_000, too_long=0)
    assert jobs_of("openai_batch", bigger, prompt_chars=1_000) == 3
    # A cap on a submission's batches (POSTLEDGER_MAX_SUBMISSION_BATCHES) makes more.
    assert jobs_of("openai_batch", month, prompt_chars=1_000, most_batches=1_000) == 40
    # Three jobs, two in flight: two rounds of the median job.
    assert wall_seconds(UpstreamKind.OPENAI_BATCH, bigger, [600.0], prompt_chars=1_000) == 1200.0
    small = Work(posts=100_000, chars=30_000_000, batches=4_000, too_long=0)
    assert jobs_of("openai_batch", small, prompt_chars=1_000) == 1


def forecast(cost: int | None, committed: int, max_cost: int | None) -> Forecast:
    return Forecast(
        month="2026-10",
        work=Work(posts=300, chars=60_000, batches=12, too_long=0),
        rates=TokenRates.assumed(),
        usage=Usage(16_000, 18_000),
        costs=[
            KindCost(UpstreamKind.OPENAI_CHAT, cost, 0),
            KindCost(UpstreamKind.OPENAI_BATCH, 1, 50),
        ],
        wall_seconds=None,
        timed_from=0,
        committed=committed,
        max_cost=max_cost,
        shortfalls=Shortfalls(settled=13, short=1, worst=5, worst_share=0.05),
    )


def test_the_budget_is_crossed_only_by_what_is_committed_and_forecast_together() -> None:
    assert not forecast(100, 0, None).crosses_budget()
    assert not forecast(100, 900, 1_000).crosses_budget()
    assert forecast(101, 900, 1_000).crosses_budget()
    assert not forecast(None, 900, 1_000).crosses_budget()  # no price: nothing to compare


def test_the_forecast_says_what_it_assumed_and_what_it_costs_on_each_way_in() -> None:
    said = "\n".join(forecast_lines(forecast(15_543, 0, 10_000)))
    assert "300 posts in 12 batches" in said
    assert "assumed 4 characters a token" in said
    assert "Cost on openai_chat (configured): 0.015543" in said
    assert "Cost on openai_batch (the same provider's other way in, 50% off)" in said
    assert "no finished batches" in said
    assert "the forecast would cross it" in said
    assert "fell short of the cost on 1 of 13 answered batches (at worst by 0.000005, 5%" in said
