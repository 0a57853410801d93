"""Ids are strings end to end: a model that echoes the post "1" as the number 1 answers it."""

from __future__ import annotations

import json

from postledger.analysis import load_analysis
from postledger.batches.output import OutputCheck
from postledger.batches.output import check_output as check_by

BUILT_IN = load_analysis(None)
# What a valid item answers for its post: its fields, without the id.
FINE = {"category": "praise", "sentiment": "positive", "summary": "fine"}


def check_output(raw: str, post_ids: list[str]) -> OutputCheck:
    """The check of `raw` by the built-in analysis."""
    return check_by(raw, post_ids, BUILT_IN)


def item(post_id: object, summary: str = "fine") -> dict[str, object]:
    return {"id": post_id, "category": "praise", "sentiment": "positive", "summary": summary}


def test_integer_id_in_the_output_answers_the_post_of_its_decimal_string() -> None:
    check = check_output(json.dumps([item(1), item("2")]), ["1", "2"])
    assert check.unusable is None
    assert set(check.valid) == {"1", "2"}
    assert check.valid["1"] == FINE
    assert check.invalid == {}


def test_integer_id_matches_inside_a_wrapped_output() -> None:
    check = check_output(json.dumps({"results": [item(10)]}), ["10"])
    assert list(check.valid) == ["10"] and check.valid["10"] == FINE


def test_boolean_id_answers_no_post() -> None:
    check = check_output(json.dumps([item(True), item("2")]), ["1", "2"])
    assert set(check.valid) == {"2"}
    assert check.invalid == {"1": "the output has no item for this post"}


def test_output_of_only_boolean_ids_names_no_post_of_the_batch() -> None:
    check = check_output(json.dumps([item(True)]), ["1", "True", "true"])
    assert check.unusable == "no item of the output names a post of the batch"


def test_float_id_answers_no_post() -> None:
    check = check_output(json.dumps([item(1.0), item("2")]), ["1", "2"])
    assert set(check.valid) == {"2"}
    assert "1" in check.invalid


def test_integer_and_string_for_the_same_post_are_two_items_for_it() -> None:
    check = check_output(json.dumps([item(1), item("1", "again")]), ["1"])
    assert check.valid == {}
    assert check.invalid == {"1": "the output has 2 items for this post"}


def test_per_post_error_with_an_integer_id_is_that_posts_failure() -> None:
    raw = json.dumps([{"id": 3, "error": "rate limited"}, item("4")])
    check = check_output(raw, ["3", "4"])
    assert check.invalid == {"3": "the upstream failed this post: rate limited"}
    assert set(check.valid) == {"4"}
