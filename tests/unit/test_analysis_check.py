"""Each post's answer checked against the user's analysis (`Analysis.check`, through
`check_output`): types, enums, bounds. An answer that does not match is invalid, with the field
and why; one that matches is the post's result, its fields and nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postledger.analysis import (
    Analysis,
    BooleanField,
    EnumField,
    EnumListField,
    IntegerField,
    TextField,
)
from postledger.batches.output import check_output

QUICK = settings(
    max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
TRIAGE = Analysis(
    name="triage",
    instructions="Triage.",
    fields=(
        EnumField("area", "d", ("billing", "app")),
        TextField("gist", "d", max_length=10, min_length=1),
        IntegerField("score", "d", minimum=1, maximum=5),
        BooleanField("reply", "d"),
        EnumListField("tags", "d", ("a", "b", "c"), min_items=1, max_items=2),
    ),
)
GOOD = {"area": "app", "gist": "short", "score": 3, "reply": True, "tags": ["a", "c"]}


def checked(**changes: Any) -> tuple[dict[str, Any] | None, str | None]:
    item = {"id": "p1", **GOOD, **changes}
    item = {k: v for k, v in item.items() if v is not ...}
    check = check_output(json.dumps([item]), ["p1"], TRIAGE)
    return check.valid.get("p1"), check.invalid.get("p1")


def test_a_matching_answer_is_the_posts_result_without_its_id_or_extra_keys() -> None:
    result, why = checked(confidence=0.9)
    assert why is None
    assert result == GOOD
    assert list(result) == list(TRIAGE.field_names)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"area": "shipping"}, 'area: "shipping" is not one of billing, app'),
        ({"area": ...}, "area: missing"),
        ({"gist": "x" * 11}, "gist: 11 characters, more than the 10 allowed"),
        ({"gist": ""}, "gist: 0 characters, fewer than the 1 asked for"),
        ({"gist": 7}, "gist: 7 is not text"),
        ({"score": 6}, "score: 6 is outside 1..5"),
        ({"score": 2.0}, "score: 2.0 is not a whole number"),
        ({"score": True}, "score: true is not a whole number"),
        ({"reply": "yes"}, 'reply: "yes" is not true or false'),
        ({"reply": 1}, "reply: 1 is not true or false"),
        ({"tags": []}, "tags: 0 values, not 1..2"),
        ({"tags": ["a", "b", "c"]}, "tags: 3 values, not 1..2"),
        ({"tags": ["a", "a"]}, "tags: a value is listed twice"),
        ({"tags": ["z"]}, 'tags: "z" is not one of a, b, c'),
        ({"tags": "a"}, 'tags: "a" is not a list'),
    ],
)
def test_an_answer_that_does_not_match_is_invalid_with_the_field_and_why(
    changes: dict[str, Any], said: str
) -> None:
    result, why = checked(**changes)
    assert result is None
    assert why == f"invalid item: {said}"


def test_a_per_post_error_is_told_apart_from_an_answer_by_the_analysiss_own_fields() -> None:
    check = check_output(json.dumps([{"id": "p1", "error": "overloaded"}]), ["p1"], TRIAGE)
    assert check.invalid["p1"] == "the upstream failed this post: overloaded"
    answered = check_output(json.dumps([{"id": "p1", "error": "x", **GOOD}]), ["p1"], TRIAGE)
    assert answered.valid["p1"] == GOOD


answers = st.fixed_dictionaries(
    {
        "area": st.sampled_from(["billing", "app"]),
        "gist": st.text(min_size=1, max_size=10),
        "score": st.integers(1, 5),
        "reply": st.booleans(),
        "tags": st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=2, unique=True),
    }
)


@QUICK
@given(answer=answers, spoiled=st.sampled_from(sorted(GOOD)), junk=st.none() | st.floats())
def test_any_answer_in_the_shape_is_kept_and_any_spoiled_field_is_not(
    answer: dict[str, Any], spoiled: str, junk: Any
) -> None:
    raw = json.dumps([{"id": "p1", **answer}])
    assert check_output(raw, ["p1"], TRIAGE).valid == {"p1": answer}
    bad = json.dumps([{"id": "p1", **answer, spoiled: junk}])
    check = check_output(bad, ["p1"], TRIAGE)
    assert check.valid == {}
    assert check.invalid["p1"].startswith(f"invalid item: {spoiled}: ")
