"""The simulator's model answering any analysis (`simulator.answers`, `simulator.analyses`) and
its strict-schema rule (`simulator.openai_strict`), as pure functions: every answer passes the
analysis's own check, the default analysis is answered byte for byte as before, an unreadable
schema is the default, and strict mode's refusals say where."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from postledger.analysis import load_analysis, read_schema
from simulator.analyses import DEFAULT_ANALYSIS, analysis_of, is_default
from simulator.model import analyse, write_output
from simulator.openai_strict import strict_problem

EVERY_KIND_SCHEMA: dict[str, Any] = {
    "description": "Everything.",
    "type": "object",
    "properties": {
        "mood": {"type": "string", "enum": ["calm", "upset"], "description": "Mood."},
        "gist": {"type": "string", "minLength": 12, "maxLength": 15, "description": "Gist."},
        "score": {"type": "integer", "minimum": -3, "maximum": 3, "description": "Score."},
        "spam": {"type": "boolean", "description": "Spam?"},
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["a", "b", "c", "d"]},
            "minItems": 2,
            "maxItems": 3,
            "description": "Tags.",
        },
    },
    "required": ["mood", "gist", "score", "spam", "tags"],
}
EVERY_KIND = read_schema(EVERY_KIND_SCHEMA, "the test", name="every_kind")
# As OpenAI's strict form says it: a text field's bound in words, and no least length.
POSTS = [("a", "I love it, thanks!"), ("b", "Why is it broken?"), ("c", ""), ("d", "x" * 500)]


@settings(max_examples=200, deadline=None)
@given(post_id=st.text(min_size=1, max_size=8), text=st.text(max_size=300))
def test_every_answer_passes_the_analysis_check_and_is_the_same_twice(
    post_id: str, text: str
) -> None:
    # Strict mode says the text bounds in words: the simulator reads them back, minimum too.
    for strict in (False, True):
        schema = EVERY_KIND.item_schema(strict=strict)
        output = write_output([(post_id, text)], schema)
        assert output == write_output([(post_id, text)], json.loads(json.dumps(schema)))
        (item,) = json.loads(output)
        assert item["id"] == post_id
        assert isinstance(EVERY_KIND.check(item), dict), EVERY_KIND.check(item)


def test_the_default_analysis_schema_is_answered_byte_for_byte_as_before() -> None:
    default = load_analysis(None)
    before = json.dumps([analyse(pid, text) for pid, text in POSTS], ensure_ascii=False)
    for schema in (None, default.item_schema(), default.item_schema(strict=True)):
        assert write_output(POSTS, schema) == before
    assert is_default(analysis_of(default.item_schema(strict=True)))


def test_a_default_summary_bound_below_the_usual_summary_is_another_analysis() -> None:
    schema = load_analysis(None).item_schema()
    schema["properties"]["summary"]["maxLength"] = 20
    analysis = analysis_of(schema)
    assert not is_default(analysis)
    (item,) = json.loads(write_output([("d", "y" * 100)], schema))
    assert len(item["summary"]) == 20 and isinstance(analysis.check(item), dict)


def _without(key: str) -> dict[str, Any]:
    schema = EVERY_KIND.item_schema()
    del schema["properties"]["gist"][key]
    return schema


def test_a_schema_the_reader_refuses_is_the_default_analysis() -> None:
    for unreadable in (
        None,
        "a string",
        {"type": "object"},
        {"type": "object", "properties": {"x": 1}, "required": ["x"]},
        _without("maxLength"),  # a text field with no bound, said or written
        {**EVERY_KIND.item_schema(), "required": "gist"},
    ):
        assert analysis_of(unreadable) is DEFAULT_ANALYSIS


def _chat(schema: Any, *, strict: Any = True) -> dict[str, Any]:
    spec = {"name": "post_analyses", "strict": strict, "schema": schema}
    return {"response_format": {"type": "json_schema", "json_schema": spec}}


def test_strict_mode_looks_into_every_object_of_the_schema() -> None:
    nested = {
        "type": "object",
        "properties": {"inner": {"$ref": "#/$defs/Inner"}},
        "required": ["inner"],
        "additionalProperties": False,
        "$defs": {"Inner": {"type": "object", "properties": {"a": {"type": "string"}}}},
    }
    said = strict_problem(_chat(nested))
    assert said == (
        "Invalid schema for response_format 'post_analyses': In context=('$defs', 'Inner'), "
        "'required' is required to be supplied and to be an array including every key in "
        "properties. Missing 'a'."
    )
    assert strict_problem(_chat(nested, strict=False)) is None
    assert strict_problem({"response_format": {"type": "json_object"}}) is None
    assert strict_problem({}) is None
    good = {"type": "object", "properties": {"results": {"type": "array", "items": {}}}}
    assert (
        strict_problem(_chat({**good, "required": ["results"], "additionalProperties": False}))
        is None
    )
