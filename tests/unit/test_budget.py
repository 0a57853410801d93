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
from postledger.guards.spend import (
    CHARS_PER_TOKEN,
    OUTPUT_TOKENS_PER_POST,
    cost_of,
    estimate,
    money,
    tokens_of,
    unpriced_budget,
    usage_tokens,
)
from postledger.record.models import FailureKind, SpendRecord, SpendState

# Examples are cheap; no deadline and no example database: the machine is shared, and
# nothing is written outside the test run.
QUICK = settings(
    max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

PRICE = Price(input=150_000, output=600_000)  # $0.15 / $0.60 per million tokens

prices = st.builds(
    Price,
    input=st.integers(min_value=0, max_value=100_000_000),
    output=st.integers(min_value=0, max_value=100_000_000),
)


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
    assert cost_of(PRICE, input_tokens, output_tokens) == cost


@QUICK
@given(prices, st.integers(0, 10**9), st.integers(0, 10**9))
def test_a_cost_is_an_integer_never_below_the_exact_price_and_less_than_a_micro_unit_above(
    price: Price, input_tokens: int, output_tokens: int
) -> None:
    cost = cost_of(price, input_tokens, output_tokens)
    exact = Fraction(input_tokens * price.input + output_tokens * price.output, 1_000_000)
    assert isinstance(cost, int)
    assert exact <= cost < exact + 1


def test_a_batch_estimate_counts_the_prompt_every_text_and_a_typical_answer_per_post() -> None:
    texts = ["a" * 10, "b" * 3]  # 3 + 1 tokens, rounded up per text
    input_tokens = tokens_of(len("prompt!")) + 3 + 1
    expected = cost_of(PRICE, input_tokens, OUTPUT_TOKENS_PER_POST * 2)
    assert estimate(PRICE, "prompt!", texts) == expected


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
    )
    assert isinstance(cost, int)
    assert cost >= floor
    assert estimate(price, prompt, [*texts, extra]) >= cost


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        ({"input_tokens": 10, "output_tokens": 5}, (10, 5)),
        ({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}, (7, 3)),
        ({"input_tokens": "12", "output_tokens": 4}, (12, 4)),
        ({"input_tokens": 1}, None),
        ({"input_tokens": "x", "output_tokens": 1}, None),
        ({"input_tokens": -5, "output_tokens": 10}, None),  # no usage: never a negative cost
        ({"prompt_tokens": 5, "completion_tokens": -1}, None),
        ({}, None),
        (None, None),
    ],
)
def test_an_upstreams_usage_is_read_in_the_names_services_use(
    usage: dict[str, object] | None, tokens: tuple[int, int] | None
) -> None:
    assert usage_tokens(usage) == tokens


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
    assert DEFAULT_PRICES["sim-analyst-1"] == PRICE


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
