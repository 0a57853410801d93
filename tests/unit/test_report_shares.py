"""The report's cost per post (`postledger/progress/shares.py`): each paid batch's cost shared
over its posts by characters with the largest-remainder method, so that the shares add up to
the bill exactly; and the report's pure parts (`postledger/progress/report.py`): the input's
own fields as columns, and cells written exactly.

Proved here: the shares of any amount sum to it exactly, each within one micro-unit of the
exact proportional share, never negative, always the same for the same input; a month's
confirmed and wasted spend land in their own columns, each summing to the month's total as
`spend_totals` counts it (the cost from the usage, else the estimate); possible and refunded
spend is nobody's. What runs a real month and reads the files back: tests/flow/test_report.py.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postledger.batches.posts import input_fields
from postledger.progress.month_table import COST, WASTED, csv_cell
from postledger.progress.report import input_columns
from postledger.progress.shares import largest_remainder, month_shares
from postledger.record.models import BatchRecord, SpendRecord, SpendState

# Examples are cheap; no deadline and no example database: the machine is shared, and
# nothing is written outside the test run.
QUICK = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
amounts = st.integers(min_value=0, max_value=10**12)
weights = st.lists(st.integers(min_value=0, max_value=100_000), min_size=1, max_size=40)


# --- largest remainder ------------------------------------------------------------------------


@QUICK
@given(amounts, weights)
def test_shares_sum_exactly_each_within_one_unit_of_its_proportional_share(
    amount: int, weights: list[int]
) -> None:
    shares = largest_remainder(amount, weights)
    assert len(shares) == len(weights)
    assert sum(shares) == amount
    assert all(share >= 0 for share in shares)
    total = sum(weights)
    # All-zero weights: an equal split.
    exact = [
        Fraction(amount * w, total) if total else Fraction(amount, len(weights)) for w in weights
    ]
    assert all(
        abs(share - proportional) < 1 for share, proportional in zip(shares, exact, strict=True)
    )
    # Rounded, not moved: a share is its proportional share rounded down or up.
    assert all(int(p) <= share <= int(p) + 1 for share, p in zip(shares, exact, strict=True))


@QUICK
@given(amounts, weights)
def test_shares_are_the_same_every_time_and_a_bigger_weight_never_gets_less(
    amount: int, weights: list[int]
) -> None:
    shares = largest_remainder(amount, weights)
    assert largest_remainder(amount, list(weights)) == shares
    for (w_a, s_a), (w_b, s_b) in pairwise(zip(weights, shares, strict=True)):
        if w_a > w_b:
            assert s_a >= s_b
        elif w_b > w_a:
            assert s_b >= s_a


@pytest.mark.parametrize(
    ("amount", "weights", "shares"),
    [
        (10, [1, 1, 1], [4, 3, 3]),  # the left-over unit to the first of equals
        (100, [1, 2], [33, 67]),  # 33.3 and 66.7: the larger remainder gets it
        (11_006, [3, 3, 3, 3, 3, 3, 3], [1573, 1573, 1572, 1572, 1572, 1572, 1572]),
        (5, [0, 0], [3, 2]),
        (0, [4, 9], [0, 0]),
        (7, [0, 5], [0, 7]),
    ],
)
def test_known_shares(amount: int, weights: list[int], shares: list[int]) -> None:
    assert largest_remainder(amount, weights) == shares


def test_what_cannot_be_shared_is_refused() -> None:
    with pytest.raises(ValueError, match="nobody"):
        largest_remainder(3, [])
    assert largest_remainder(0, []) == []
    with pytest.raises(ValueError, match="negative"):
        largest_remainder(-1, [1])
    with pytest.raises(ValueError, match="negative"):
        largest_remainder(1, [1, -1])


# --- a month's spend ------------------------------------------------------------------------


def batch(
    seq: int, request: list[list[str]] | None, post_ids: list[str] | None = None
) -> BatchRecord:
    return BatchRecord(
        batch_id=f"2026-10-b{seq:04d}",
        month="2026-10",
        seq=seq,
        post_ids=post_ids or [post_id for post_id, _ in request or []],
        request=request,
        idempotency_key=f"k{seq}",
    )


def spent(
    seq: int, state: SpendState, cost: int | None, estimated: int | None = 999
) -> SpendRecord:
    return SpendRecord(
        month="2026-10",
        batch_id=f"2026-10-b{seq:04d}",
        send=1,
        state=state,
        cost=cost,
        estimated_cost=estimated,
    )


def test_each_kind_of_spend_lands_in_its_own_column_and_sums_exactly() -> None:
    batches = [
        batch(1, [["a", "x" * 10], ["b", "x" * 20], ["c", "x" * 30]]),
        batch(2, [["b", "yy"], ["d", "y"]]),  # b again: a second paid attempt
        batch(3, [["e", "z"]]),  # sent, outcome unknown: nobody's yet
        batch(4, None, ["f", "g"]),  # charged without a kept request: shared equally
    ]
    rows = [
        spent(1, SpendState.CONFIRMED, 1_001),
        spent(2, SpendState.WASTED, 7),
        spent(2, SpendState.CONFIRMED, None, estimated=5),  # no usage: the estimate
        spent(3, SpendState.POSSIBLE, None, estimated=400),
        spent(3, SpendState.REFUNDED, None, estimated=400),
        spent(4, SpendState.CONFIRMED, 3),
    ]
    shares = month_shares(rows, batches)
    assert sum(shares.confirmed.values()) == 1_001 + 5 + 3
    assert sum(shares.wasted.values()) == 7
    assert dict(shares.confirmed) == {"a": 167, "b": 334 + 3, "c": 500, "d": 2, "f": 2, "g": 1}
    assert dict(shares.wasted) == {"b": 5, "d": 2}
    assert "e" not in shares.confirmed and "e" not in shares.wasted


def test_spend_of_a_batch_the_month_does_not_have_is_not_silently_dropped() -> None:
    with pytest.raises(ValueError, match="2026-10-b0009"):
        month_shares([spent(9, SpendState.CONFIRMED, 10)], [batch(1, [["a", "x"]])])


# --- the input's own fields --------------------------------------------------------------------


def test_a_lines_own_fields_are_kept_as_one_canonical_text() -> None:
    line: dict[str, object] = {
        "text": "t",
        "lang": "fr",
        "id": "p1",
        "author": "Zoë",
        "tags": ["a", "b"],
    }
    kept = input_fields(line)
    assert kept == '{"author":"Zoë","lang":"fr","tags":["a","b"]}'
    assert input_fields(dict(reversed(list(line.items())))) == kept  # key order: no change
    assert input_fields({"id": "p1", "text": "t"}) == ""
    # A lone surrogate cannot be stored as UTF-8: it is kept escaped, still readable as JSON.
    lone = input_fields({"id": "p1", "text": "t", "note": "\ud800"})
    assert lone == '{"note":"\\ud800"}'
    lone.encode("utf-8")


def test_input_fields_become_columns_in_the_order_first_met_without_hiding_the_reports() -> None:
    given: list[dict[str, Any]] = [
        {"author": "a", "status": "draft"},
        {"source": "forum", "author": "b"},
        {"input_status": "x", "cost_currency_units": 3},
    ]
    assert input_columns(given) == {
        "author": "author",
        "input_status": "status",
        "source": "source",
        "input_input_status": "input_status",
        "input_cost_currency_units": "cost_currency_units",
    }


@pytest.mark.parametrize(
    ("column", "value", "cell"),
    [
        (COST, 10_847, "0.010847"),
        (WASTED, 0, "0.000000"),
        (COST, 12_345_678, "12.345678"),
        ("author", "Zoë", "Zoë"),
        ("author", None, ""),
        ("likes", 3, "3"),
        ("score", 0.5, "0.5"),
        ("verified", True, "true"),
        ("tags", ["a", "é"], '["a", "é"]'),
        ("place", {"city": "Lyon"}, '{"city": "Lyon"}'),
    ],
)
def test_csv_cells_are_exact_and_lists_are_json(column: str, value: object, cell: str) -> None:
    assert csv_cell(column, value) == cell
