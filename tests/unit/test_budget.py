"""Money: prices, estimates and costs as integers (`postledger/guards/spend.py`), and the
month's totals over in-memory spend records (`spend_summary` in `postledger/guards/charges.py`).

`budget_holds` and `committed` (holding a batch that could cross `max_cost`) read the ledger in
a session, so they are covered by the ledger tests, not here.

Rules proved: R3 (the possible charge written before the call is an estimate that does not fall
short: costs round up, never in the payer's favour), R27/R29 (the month's spend shows confirmed,
possible and wasted money apart; a refunded submission costs nothing), money as exact integers.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from postledger.defaults import DEFAULT_PRICES, Price
from postledger.guards.charges import WASTING, spend_summary
from postledger.guards.estimates import CHARS_PER_TOKEN, OUTPUT_TOKENS_PER_POST, estimate, tokens_of
from postledger.guards.spend import cost_of, money, unpriced_budget
from postledger.guards.usage import Usage, anthropic_usage, openai_usage, usage_of
from postledger.record.models import FailureKind, SpendRecord, SpendState
from postledger.settings import Settings, UpstreamKind

# Examples are cheap; no deadline and no example database: the machine is shared, and
# nothing is written outside the test run.
QUICK = settings(
    max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

PRICE = Price(input=150_000, output=600_000)  # $0.15 / $0.60 per million tokens

# --- tokens and costs -------------------------------------------------------------------------


@pytest.mark.parametrize(("chars", "tokens"), [(0, 0), (1, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_characters_become_tokens_rounded_up(chars: int, tokens: int) -> None:
    assert tokens_of(chars) == tokens


@pytest.mark.parametrize(
    ("input_tokens", "output_tokens", "cost"),
    [
        (0, 0, 0),
        (1_000_000, 0, 150_000),
        (0, 1_000_000, 600_000),
        (1, 0, 1),  # 0.15 micro-units: rounded up, never down to nothing
        (10, 10, 8),  # 7.5 micro-units -> 8
        (1_000, 500, 450),
    ],
)
def test_a_usage_costs_its_tokens_at_the_price_rounded_up_to_the_micro_unit(
    input_tokens: int, output_tokens: int, cost: int
) -> None:
    assert cost_of(PRICE, Usage(input_tokens, output_tokens)) == cost


prices = st.builds(
    Price,
    input=st.integers(min_value=0, max_value=100_000_000),
    output=st.integers(min_value=0, max_value=100_000_000),
    cached_input=st.none() | st.integers(min_value=0, max_value=100_000_000),
    cache_write=st.none() | st.integers(min_value=0, max_value=100_000_000),
    discount_percent=st.none() | st.integers(0, 100),
)
usages = st.builds(
    Usage,
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
)


@QUICK
@given(prices, usages)
def test_a_cost_is_an_integer_never_below_the_exact_price_and_less_than_a_micro_unit_above(
    price: Price, usage: Usage
) -> None:
    cost = cost_of(price, usage)
    cached = price.input if price.cached_input is None else price.cached_input
    written = price.input if price.cache_write is None else price.cache_write
    listed = (
        usage.input * price.input
        + usage.cached_input * cached
        + usage.cache_write * written
        + usage.output * price.output
    )
    exact = Fraction(listed, 1_000_000) * Fraction(100 - (price.discount_percent or 0), 100)
    assert isinstance(cost, int)
    assert exact <= cost < exact + 1


def test_each_class_of_token_is_billed_at_its_rate_and_the_discount_comes_off_all() -> None:
    price = DEFAULT_PRICES["sim-analyst-1"]  # 0.15 in, 0.015 cached, 0.1875 written, 0.60 out
    usage = Usage(input=1_000_000, output=1_000_000, cached_input=1_000_000, cache_write=1_000_000)
    assert cost_of(price, usage) == 150_000 + 600_000 + 15_000 + 187_500
    half = price.model_copy(update={"discount_percent": 50})
    assert cost_of(half, usage) == (150_000 + 600_000 + 15_000 + 187_500) // 2
    assert cost_of(half, Usage(1, 0)) == 1  # 0.075 micro-units: rounded up once, at the end
    # A table without cache rates (written before they existed) bills cached input as input.
    assert cost_of(PRICE, Usage(0, 0, cached_input=1_000_000)) == 150_000


def test_a_batch_estimate_counts_the_prompt_every_text_and_a_typical_answer_per_post() -> None:
    texts = ["a" * 10, "b" * 3]  # 3 + 1 tokens, rounded up per text
    input_tokens = tokens_of(len("prompt!")) + 3 + 1
    expected = cost_of(PRICE, Usage(input_tokens, OUTPUT_TOKENS_PER_POST * 2))
    assert estimate(PRICE, "prompt!", texts) == expected


def test_an_estimate_prices_the_instructions_as_a_cache_write_where_that_costs_more() -> None:
    # The first batch of a month on Anthropic writes its instructions to the cache, at 1.25x.
    price = DEFAULT_PRICES["sim-analyst-1"]
    prompt, texts = "p" * 4_000, ["a" * 40]
    written = Usage(10, OUTPUT_TOKENS_PER_POST, cache_write=1_000)
    assert estimate(price, prompt, texts) == cost_of(price, written)
    assert estimate(PRICE, prompt, texts) == cost_of(PRICE, Usage(1_010, OUTPUT_TOKENS_PER_POST))


@QUICK
@given(prices, st.text(max_size=50), st.lists(st.text(max_size=200), max_size=25), st.text())
def test_an_estimate_never_falls_short_and_grows_with_every_post(
    price: Price, prompt: str, texts: list[str], extra: str
) -> None:
    cost = estimate(price, prompt, texts)
    chars = len(prompt) + sum(len(t) for t in texts)
    floor = Fraction(
        Fraction(chars, CHARS_PER_TOKEN) * price.input
        + OUTPUT_TOKENS_PER_POST * len(texts) * price.output,
        1_000_000,
    ) * Fraction(100 - (price.discount_percent or 0), 100)
    assert isinstance(cost, int)
    assert cost >= floor
    assert estimate(price, prompt, [*texts, extra]) >= cost


@pytest.mark.parametrize(
    ("usage", "used"),
    [
        ({"input_tokens": 10, "output_tokens": 5}, Usage(10, 5)),  # saved before cache classes
        (
            {
                "input_tokens": 3,
                "cached_input_tokens": 7,
                "cache_write_tokens": 2,
                "output_tokens": 5,
            },
            Usage(3, 5, cached_input=7, cache_write=2),
        ),
        ({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}, Usage(7, 3)),
        (
            {
                "prompt_tokens": 2000,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 1152},
            },
            Usage(848, 3, cached_input=1152),
        ),
        ({"input_tokens": "12", "output_tokens": 4}, Usage(12, 4)),
        ({"input_tokens": 9, "completion_tokens": 4}, Usage(9, 4)),  # names mixed, as before
        ({"prompt_tokens": 9, "output_tokens": 4}, Usage(9, 4)),
        ({"input_tokens": 1}, None),
        ({"input_tokens": "x", "output_tokens": 1}, None),
        ({"input_tokens": -5, "output_tokens": 10}, None),  # no usage: never a negative cost
        ({"input_tokens": 5, "cached_input_tokens": -1, "output_tokens": 10}, None),
        ({"prompt_tokens": 5, "completion_tokens": -1}, None),
        ({}, None),
        (None, None),
    ],
)
def test_a_usage_is_read_by_class_of_token(
    usage: dict[str, object] | None, used: Usage | None
) -> None:
    assert usage_of(usage) == used


def test_each_provider_says_its_cached_tokens_in_its_own_way() -> None:
    # OpenAI counts them inside prompt_tokens; Anthropic apart from input_tokens.
    openai = {
        "prompt_tokens": 1500,
        "completion_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 1152},
    }
    assert usage_of(openai_usage(openai)) == Usage(348, 40, cached_input=1152)
    assert usage_of(openai_usage({**openai, "prompt_tokens_details": None})) == Usage(1500, 40)
    anthropic = {
        "input_tokens": 300,
        "output_tokens": 40,
        "cache_read_input_tokens": 1200,
        "cache_creation_input_tokens": 0,
    }
    assert usage_of(anthropic_usage(anthropic)) == Usage(300, 40, cached_input=1200)
    written = {**anthropic, "cache_read_input_tokens": None, "cache_creation_input_tokens": 1200}
    assert usage_of(anthropic_usage(written)) == Usage(300, 40, cache_write=1200)
    assert anthropic_usage({"input_tokens": 1}) is None and openai_usage("x") is None


# --- money shown exactly --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("micro", "shown"),
    [
        (0, "0.000000"),
        (1, "0.000001"),
        (150_000, "0.150000"),
        (1_000_000, "1.000000"),
        (12_345_678, "12.345678"),
        (-2_500_000, "-2.500000"),
    ],
)
def test_micro_units_are_shown_as_currency_units_exactly(micro: int, shown: str) -> None:
    assert money(micro) == shown


@QUICK
@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_money_shown_reads_back_as_the_same_integer(micro: int) -> None:
    assert Decimal(money(micro)) * 1_000_000 == micro


# --- prices ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [{"input": -1, "output": 0}, {"input": 1, "output": -1}, {"input": 1, "output": 1, "x": 2}],
)
def test_a_price_is_never_negative_and_has_nothing_unknown(fields: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        Price(**fields)


def test_the_simulators_model_has_a_price_so_a_budget_can_apply_to_it() -> None:
    # The simulator bills these rates (its own table, `simulator.billing`): spend is its bill.
    assert DEFAULT_PRICES["sim-analyst-1"] == Price(
        input=150_000, output=600_000, cached_input=15_000, cache_write=187_500
    )


@pytest.mark.parametrize(
    ("kind", "discount"),
    [
        (UpstreamKind.TASK_API, 0),
        (UpstreamKind.OPENAI_CHAT, 0),
        (UpstreamKind.ANTHROPIC_MESSAGES, 0),
        (UpstreamKind.OPENAI_BATCH, 50),
        (UpstreamKind.ANTHROPIC_BATCH, 50),
    ],
)
def test_a_batch_api_takes_its_discount_off_the_default_table(
    kind: UpstreamKind, discount: int
) -> None:
    settings = Settings(upstream_kind=kind, model="sim-analyst-1")
    price = settings.price()
    assert price is not None and price.discount_percent == discount
    assert price.input == 150_000  # the table keeps list prices: the kind takes the discount
    overridden = Settings(upstream_kind=kind, model="sim-analyst-1", batch_discount=10).price()
    assert overridden is not None and overridden.discount_percent == (10 if discount else 0)
    # A model whose table entry sets its own discount keeps it on every kind.
    own = {"m": Price(input=1, output=1, discount_percent=20)}
    priced = Settings(upstream_kind=kind, model="m", prices=own).price()
    assert priced is not None and priced.discount_percent == 20
    # A table read back from a Prefect block has every field set: its unset discount is
    # None, not 0, and the kind's still applies.
    saved = Price.model_validate(DEFAULT_PRICES["sim-analyst-1"].model_dump())
    from_block = Settings(upstream_kind=kind, model="m", prices={"m": saved}).price()
    assert from_block is not None and from_block.discount() == discount
    # The sibling's price, asked for by kind (the forecast's "on the other way in").
    assert settings.price(UpstreamKind.OPENAI_BATCH).discount_percent == 50  # type: ignore[union-attr]


def test_a_budget_without_a_price_says_how_to_add_one() -> None:
    said = unpriced_budget("gpt-x")
    assert "POSTLEDGER_PRICES" in said and "gpt-x" in said and "POSTLEDGER_MAX_COST" in said


# --- the month's spend ----------------------------------------------------------------------------


def spend(
    state: SpendState,
    *,
    estimated: int | None = None,
    cost: int | None = None,
    tokens: tuple[int, int] | None = None,
    send: int = 1,
) -> SpendRecord:
    return SpendRecord(
        month="2026-09",
        batch_id="2026-09-b0001",
        send=send,
        state=state,
        estimated_cost=estimated,
        cost=cost,
        input_tokens=tokens[0] if tokens else None,
        output_tokens=tokens[1] if tokens else None,
    )


def test_the_months_spend_keeps_confirmed_possible_and_wasted_money_apart() -> None:
    rows = [
        spend(SpendState.CONFIRMED, estimated=100, cost=90, tokens=(400, 100)),
        spend(SpendState.CONFIRMED, estimated=70),  # no usage: the estimate stands
        spend(SpendState.POSSIBLE, estimated=50, send=2),
        spend(SpendState.POSSIBLE),  # no price known
        spend(SpendState.WASTED, estimated=40, cost=30, tokens=(100, 20)),
        spend(SpendState.WASTED, estimated=25),
        spend(SpendState.REFUNDED, estimated=1_000),
    ]
    assert spend_summary(rows) == {
        "confirmed": 160,
        "possible": 50,
        "wasted": 55,
        "submissions": 7,
        "refunded_submissions": 1,
        "input_tokens": 500,
        "output_tokens": 120,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
    }


def test_an_empty_month_has_spent_nothing() -> None:
    assert spend_summary([]) == {
        "confirmed": 0,
        "possible": 0,
        "wasted": 0,
        "submissions": 0,
        "refunded_submissions": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
    }


@QUICK
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(SpendState)),
            st.one_of(st.none(), st.integers(0, 10**9)),
            st.one_of(st.none(), st.integers(0, 10**9)),
        ),
        max_size=30,
    )
)
def test_a_refunded_submission_never_counts_as_money_and_every_other_one_counts_once(
    rows: list[tuple[SpendState, int | None, int | None]],
) -> None:
    records = [spend(state, estimated=est, cost=cost) for state, est, cost in rows]
    summary = spend_summary(records)
    paid = sum(
        (cost if cost is not None and state is not SpendState.POSSIBLE else est or 0)
        for state, est, cost in rows
        if state is not SpendState.REFUNDED
    )
    assert summary["confirmed"] + summary["possible"] + summary["wasted"] == paid
    assert summary["refunded_submissions"] == sum(s is SpendState.REFUNDED for s, _, _ in rows)
    assert summary["submissions"] == len(rows)
    assert all(isinstance(value, int) for value in summary.values())


def test_a_charge_that_bought_nothing_usable_is_counted_as_wasted() -> None:
    assert {
        FailureKind.BATCH_INVALID,
        FailureKind.UPSTREAM_FAILED,
        FailureKind.TASK_UNKNOWN,
    } == WASTING
