"""Batch planning (`postledger/batches/planning.py`): consecutive posts, at most N posts and C
characters per batch, too-long posts set aside, the same input always giving the same plan.

Rules proved: R7 (at most 25 posts and the configured characters per batch; a single post longer
than that is never sent), R9 (batches follow the input's order).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postledger.batches.planning import Sized, plan_batches
from postledger.settings import Settings

# Examples are cheap; no deadline and no example database: the machine is shared, and
# nothing is written outside the test run.
QUICK = settings(
    max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def sized(*chars: int) -> list[Sized]:
    return [Sized(f"p{i}", c) for i, c in enumerate(chars, start=1)]


@pytest.mark.parametrize(
    ("chars", "max_posts", "max_chars", "batches", "too_long"),
    [
        ((), 25, 100, [], []),
        ((10,), 25, 100, [["p1"]], []),
        ((50, 50), 25, 100, [["p1", "p2"]], []),  # exactly the limit fits
        ((50, 51), 25, 100, [["p1"], ["p2"]], []),
        ((100,), 25, 100, [["p1"]], []),
        ((101,), 25, 100, [], ["p1"]),
        ((10, 101, 10), 25, 100, [["p1", "p3"]], ["p2"]),
        ((1, 1, 1, 1, 1), 2, 100, [["p1", "p2"], ["p3", "p4"], ["p5"]], []),
        ((60, 30, 30, 90, 10), 25, 100, [["p1", "p2"], ["p3"], ["p4", "p5"]], []),
        ((200, 300), 25, 100, [], ["p1", "p2"]),
    ],
)
def test_batches_are_filled_in_order_up_to_the_post_and_character_limits(
    chars: tuple[int, ...],
    max_posts: int,
    max_chars: int,
    batches: list[list[str]],
    too_long: list[str],
) -> None:
    plan = plan_batches(sized(*chars), max_posts=max_posts, max_chars=max_chars)
    assert plan.batches == batches
    assert [p.post_id for p in plan.too_long] == too_long


def test_a_month_of_short_posts_goes_out_in_batches_of_at_most_25() -> None:
    plan = plan_batches(sized(*[10] * 60), max_posts=25, max_chars=20_000)
    assert [len(b) for b in plan.batches] == [25, 25, 10]


def test_a_post_longer_than_a_batch_is_kept_aside_with_its_size() -> None:
    plan = plan_batches([Sized("long", 20_001)], max_posts=25, max_chars=20_000)
    assert plan.too_long == [Sized("long", 20_001)]
    assert plan.batches == []


@pytest.mark.parametrize(("max_posts", "max_chars"), [(0, 100), (25, 0), (-1, -1)])
def test_limits_below_one_are_refused(max_posts: int, max_chars: int) -> None:
    with pytest.raises(ValueError):
        plan_batches(sized(1), max_posts=max_posts, max_chars=max_chars)


def test_the_default_settings_plan_at_most_25_posts_per_batch() -> None:
    assert Settings().max_batch_posts == 25


@QUICK
@given(
    st.lists(st.integers(min_value=0, max_value=300), max_size=80),
    st.integers(min_value=1, max_value=30),
    st.integers(min_value=1, max_value=400),
)
def test_every_post_is_in_exactly_one_batch_or_too_long_and_no_batch_exceeds_a_limit(
    chars: list[int], max_posts: int, max_chars: int
) -> None:
    posts = sized(*chars)
    size = {p.post_id: p.chars for p in posts}
    plan = plan_batches(posts, max_posts=max_posts, max_chars=max_chars)

    for batch in plan.batches:
        assert 1 <= len(batch) <= max_posts
        assert sum(size[pid] for pid in batch) <= max_chars
    # Too long means longer than a whole batch, and nothing else.
    assert plan.too_long == [p for p in posts if p.chars > max_chars]
    # Order kept (R9): the batches, joined, are the sendable posts in input order.
    sent = [pid for batch in plan.batches for pid in batch]
    assert sent == [p.post_id for p in posts if p.chars <= max_chars]
    # Greedy: a batch is closed only when the next post would not fit in it.
    for batch, following in zip(plan.batches, plan.batches[1:], strict=False):
        full = len(batch) == max_posts
        assert full or sum(size[pid] for pid in batch) + size[following[0]] > max_chars
    # Deterministic: the same input gives the same plan.
    assert plan_batches(posts, max_posts=max_posts, max_chars=max_chars) == plan
