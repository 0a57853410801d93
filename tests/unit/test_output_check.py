"""Checking a batch's saved raw output (`check_output` in `postledger/batches/output.py`): one
verdict per post, never an exception, the same verdict every time.

Rules proved: R4 (the check is a pure function of the saved text: run again after a crash, it
gives the same answer), R12 (an output unusable as a whole is recognised as such: not JSON, not
a list, no item for any post of the batch), R13 (valid items are kept apart from invalid ones;
an output cut short keeps its complete items and only the posts after the cut lack one),
R29 (only an item that passes the check counts as a result).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postledger.analysis import load_analysis
from postledger.analysis.default import Category, Sentiment
from postledger.batches.output import OutputCheck, check_output

# Examples are cheap; no deadline and no example database: the machine is shared, and
# nothing is written outside the test run.
QUICK = settings(
    max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

IDS = ["p1", "p2", "p3"]
BUILT_IN = load_analysis(None)


def checked(output: str, post_ids: list[str]) -> OutputCheck:
    """The check of `output` by the built-in analysis."""
    return check_output(output, post_ids, BUILT_IN)


def item(post_id: Any, **changes: Any) -> dict[str, Any]:
    return {
        "id": post_id,
        "category": "complaint",
        "sentiment": "negative",
        "summary": f"summary of {post_id}",
        **changes,
    }


def raw(*items: Any) -> str:
    return json.dumps(list(items))


# --- valid and partly invalid --------------------------------------------------------------------


def test_a_valid_output_gives_every_post_its_result() -> None:
    check = checked(raw(*(item(i) for i in IDS)), IDS)
    assert check.unusable is None
    assert check.invalid == {}
    assert set(check.valid) == set(IDS)
    assert check.valid["p2"] == {
        "category": Category.COMPLAINT,
        "sentiment": Sentiment.NEGATIVE,
        "summary": "summary of p2",
    }


def test_items_may_come_in_any_order_and_wrapped_in_results() -> None:
    items = [item("p3"), item("p1"), item("p2")]
    assert checked(json.dumps({"results": items}), IDS) == checked(raw(*items), IDS)
    assert set(checked(raw(*items), IDS).valid) == set(IDS)


def test_unknown_fields_of_an_item_are_ignored() -> None:
    check = checked(raw(item("p1", confidence=0.9)), ["p1"])
    assert set(check.valid) == {"p1"}


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (item("p2", category="rant"), "invalid item: category"),
        (item("p2", category="Complaint"), "invalid item: category"),
        (item("p2", sentiment="angry"), "invalid item: sentiment"),
        (item("p2", summary=""), "invalid item: summary"),
        (item("p2", summary="x" * 1001), "invalid item: summary"),
        ({"id": "p2", "category": "news", "sentiment": "neutral"}, "invalid item: summary"),
        ({"id": "p2", "error": "content_filter: refused"}, "the upstream failed this post"),
    ],
)
def test_an_invalid_item_fails_only_its_own_post_with_the_reason(bad: Any, reason: str) -> None:
    check = checked(raw(item("p1"), bad, item("p3")), IDS)
    assert check.unusable is None
    assert set(check.valid) == {"p1", "p3"}
    assert list(check.invalid) == ["p2"]
    assert check.invalid["p2"].startswith(reason)


def test_an_item_with_an_error_and_a_full_answer_is_judged_by_its_answer() -> None:
    check = checked(raw(item("p1", error="warning only")), ["p1"])
    assert set(check.valid) == {"p1"}


def test_a_post_without_an_item_is_missing_and_the_others_still_count() -> None:
    check = checked(raw(item("p1")), IDS)
    assert set(check.valid) == {"p1"}
    assert check.invalid == {
        "p2": "the output has no item for this post",
        "p3": "the output has no item for this post",
    }


def test_a_post_answered_twice_is_invalid_whichever_answer_is_right() -> None:
    check = checked(raw(item("p1"), item("p2"), item("p2", summary="other")), IDS)
    assert set(check.valid) == {"p1"}
    assert check.invalid["p2"] == "the output has 2 items for this post"
    assert check.invalid["p3"] == "the output has no item for this post"


def test_items_for_posts_outside_the_batch_are_ignored() -> None:
    check = checked(raw(item("p1"), item("p99"), item("p2"), item("p3"), "noise", 7), IDS)
    assert set(check.valid) == set(IDS)
    assert check.invalid == {}


@pytest.mark.parametrize("echoed", [1, "1"])
def test_a_post_id_echoed_as_a_number_still_names_the_post(echoed: Any) -> None:
    check = checked(raw(item(echoed), item("2")), ["1", "2"])
    assert set(check.valid) == {"1", "2"}
    assert check.valid["1"] == {
        "category": "complaint",
        "sentiment": "negative",
        "summary": f"summary of {echoed}",
    }


def test_a_boolean_is_no_post_id() -> None:
    check = checked(raw(item(True), item("p2")), ["1", "p2"])
    assert set(check.valid) == {"p2"}
    assert check.invalid == {"1": "the output has no item for this post"}


# --- cut short (R13) ------------------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [False, True])
def test_an_output_cut_short_keeps_its_complete_items(wrap: bool) -> None:
    whole = json.dumps({"results": [item(i) for i in IDS]} if wrap else [item(i) for i in IDS])
    cut = whole[: whole.index('"p3"') + 10]
    check = checked("  \n" + cut, IDS)
    assert check.unusable is None
    assert set(check.valid) == {"p1", "p2"}
    assert check.invalid == {"p3": "the output has no item for this post"}


@pytest.mark.parametrize(
    "cut",
    [
        '[{"id": "p1", "categ',  # not one complete item
        '[1, 2, {"id": "p1"',  # not a list of objects
        '{"id": "p1", "category": "news"',  # an object cut short, not a list
        "[",
    ],
)
def test_an_output_cut_short_before_any_complete_item_is_unusable(cut: str) -> None:
    check = checked(cut, IDS)
    assert check.unusable is not None and "not JSON" in check.unusable
    assert check.valid == {} and check.invalid == {}


# --- unusable as a whole (R12) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "why"),
    [
        ("", "not JSON"),
        ("Sorry, I cannot help with that.", "not JSON"),
        ("```json\n[]\n```", "not JSON"),
        ("{}", "a JSON dict, not a list"),
        ('{"results": "none"}', "a JSON dict, not a list"),
        ("42", "a JSON int, not a list"),
        ('"p1"', "a JSON str, not a list"),
        ("null", "a JSON NoneType, not a list"),
        ("[]", "no item of the output names a post of the batch"),
        (json.dumps([item("p7"), item("p8")]), "no item of the output names a post of the batch"),
        (json.dumps([{"summary": "no id"}]), "no item of the output names a post of the batch"),
    ],
)
def test_garbage_and_wrong_ids_make_the_whole_output_unusable(output: str, why: str) -> None:
    check = checked(output, IDS)
    assert check.unusable is not None and why in check.unusable
    assert check.valid == {} and check.invalid == {}


@pytest.mark.parametrize(
    "output",
    [
        "[" + "1" * 5000 + "]",
        '[{"id": "p1", "category": "news", "score": ' + "9" * 5000 + "}]",
        "[" * 100_000,
        '[{"id": "p1", "category": "news"}, ' + "[" * 100_000,
    ],
    ids=["huge-integer", "huge-integer-in-an-item", "deep-nesting", "deep-nesting-after-a-cut"],
)
def test_an_output_json_cannot_even_read_is_unusable_rather_than_a_crash(output: str) -> None:
    check = checked(output, ["p1"])
    # Unusable as a whole, or (after a cut) its one complete item judged: never a crash,
    # never a post completed from it.
    assert check.unusable is not None or "p1" in check.invalid
    assert check.valid == {}


# --- properties ---------------------------------------------------------------------------------

VERDICTS = ["valid", "invalid", "missing", "twice", "error"]


@QUICK
@given(
    st.lists(st.sampled_from(VERDICTS), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=3),
    st.randoms(use_true_random=False),
    st.booleans(),
)
def test_each_post_gets_the_verdict_its_item_deserves_and_nothing_else(
    verdicts: list[str], strays: int, order: Any, wrap: bool
) -> None:
    post_ids = [f"post-{i}" for i in range(len(verdicts))]
    items: list[Any] = []
    for post_id, verdict in zip(post_ids, verdicts, strict=True):
        if verdict == "valid":
            items.append(item(post_id))
        elif verdict == "invalid":
            items.append(item(post_id, sentiment="unsure"))
        elif verdict == "twice":
            items += [item(post_id), item(post_id)]
        elif verdict == "error":
            items.append({"id": post_id, "error": "server_error"})
    items += [item(f"stray-{i}") for i in range(strays)]
    order.shuffle(items)
    output = json.dumps({"results": items} if wrap else items)

    check = checked(output, post_ids)
    if all(v == "missing" for v in verdicts):
        assert check.unusable is not None
        return
    assert check.unusable is None
    assert set(check.valid) == {p for p, v in zip(post_ids, verdicts, strict=True) if v == "valid"}
    assert set(check.invalid) == set(post_ids) - set(check.valid)
    for post_id, verdict in zip(post_ids, verdicts, strict=True):
        if verdict == "missing":
            assert check.invalid[post_id] == "the output has no item for this post"
        elif verdict == "twice":
            assert check.invalid[post_id] == "the output has 2 items for this post"
    assert checked(output, post_ids) == check  # R4: the same text, the same verdict


@QUICK
@given(st.integers(min_value=1, max_value=8), st.data())
def test_an_output_cut_anywhere_keeps_exactly_the_items_complete_before_the_cut(
    count: int, data: st.DataObject
) -> None:
    post_ids = [f"p{i}" for i in range(count)]
    items = [item(p, summary=f's{{]}}, "{p}" ') for p in post_ids]
    whole = json.dumps(items)
    at = data.draw(st.integers(min_value=0, max_value=len(whole) - 1))
    cut = whole[:at]
    ends = [len(json.dumps(items[: n + 1])) - 1 for n in range(count)]  # just after item n
    complete = [p for p, end in zip(post_ids, ends, strict=True) if end <= at]

    check = checked(cut, post_ids)
    if not complete:
        assert check.unusable is not None
        return
    assert check.unusable is None
    assert sorted(check.valid) == sorted(complete)
    assert set(check.invalid) == set(post_ids) - set(complete)


@QUICK
@given(st.text(max_size=200), st.lists(st.text(min_size=1, max_size=5), max_size=5, unique=True))
def test_the_check_never_raises_and_gives_every_post_one_verdict(
    output: str, post_ids: list[str]
) -> None:
    check = checked(output, post_ids)
    if check.unusable is None:
        assert set(check.valid) | set(check.invalid) == set(post_ids)
        assert not set(check.valid) & set(check.invalid)
    else:
        assert check.valid == {} and check.invalid == {}
