"""Reading a user's analysis (`postledger/analysis/`): a pydantic model and a JSON Schema
become the same description; a bad one is refused with the source, the field and what to do,
every problem at once, before anything is sent."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from postledger.analysis import (
    Analysis,
    AnalysisError,
    BooleanField,
    EnumField,
    EnumListField,
    IntegerField,
    TextField,
    fields_version,
    load_analysis,
    read_schema,
)
from postledger.analysis.default import DEFAULT_INSTRUCTIONS
from postledger.analysis.strict import MOST_ENUM_VALUES
from tests.support.repo import REPO

TRIAGE_JSON = REPO / "examples" / "support_triage.json"


class Tone(StrEnum):
    CALM = "calm"
    HEATED = "heated"


class Everything(BaseModel):
    """Say everything about the post."""

    tone: Tone = Field(description="How it sounds.")
    lang: Literal["en", "de"] = Field(description="Its language.")
    gist: str = Field(max_length=80, min_length=2, description="Its gist.")
    score: int = Field(ge=1, le=5, description="How good it is.")
    positive: int = Field(gt=0, lt=10, description="A bounded count.")
    asks: bool = Field(description="Whether it asks something.")
    topics: list[Literal["a", "b", "c"]] = Field(max_length=2, description="Its topics.")


def schema(**properties: Any) -> dict[str, Any]:
    """A JSON Schema document with these properties, all required, described."""
    return {
        "description": "Look at the post.",
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def problems(document: Any) -> str:
    with pytest.raises(AnalysisError) as refused:
        read_schema(document, "my.json", name="mine")
    return str(refused.value)


# --- what is read -----------------------------------------------------------------------------


def test_a_pydantic_model_gives_every_kind_of_field() -> None:
    analysis = read_schema(Everything.model_json_schema(), "Everything", name="Everything")
    assert analysis.name == "Everything"
    assert analysis.instructions == "Say everything about the post."
    assert analysis.fields == (
        EnumField("tone", "How it sounds.", ("calm", "heated")),
        EnumField("lang", "Its language.", ("en", "de")),
        TextField("gist", "Its gist.", max_length=80, min_length=2),
        IntegerField("score", "How good it is.", minimum=1, maximum=5),
        IntegerField("positive", "A bounded count.", minimum=1, maximum=9),
        BooleanField("asks", "Whether it asks something."),
        EnumListField("topics", "Its topics.", ("a", "b", "c"), 0, 2, True),
    )


def test_the_example_is_the_same_analysis_as_a_model_and_as_a_json_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    from_model = load_analysis("examples.support_triage:SupportTriage")
    from_file = load_analysis("examples/support_triage.json")
    from_path = load_analysis("examples/support_triage.py:SupportTriage")
    assert from_model == from_file == from_path
    assert from_model.field_names == ("product_area", "urgency", "needs_reply", "summary")


def test_an_analysis_written_out_reads_back_the_same() -> None:
    for analysis in (load_analysis(None), load_analysis(str(TRIAGE_JSON))):
        again = load_analysis(json.dumps(analysis.json_schema()))
        assert again == analysis
        assert fields_version(again) == fields_version(analysis)


def test_the_built_in_analysis_keeps_the_fingerprint_version_earlier_ledgers_hold() -> None:
    built_in = load_analysis(None)
    assert built_in.instructions == DEFAULT_INSTRUCTIONS
    assert built_in.field_names == ("category", "sentiment", "summary")
    assert fields_version(built_in) == "1"
    # Other instructions are the prompt part's business, not the fields' version.
    assert fields_version(load_analysis(None, instructions="Other words.")) == "1"
    assert fields_version(load_analysis(str(TRIAGE_JSON))) != "1"


def test_instructions_given_apart_replace_the_analysiss_own() -> None:
    assert load_analysis(str(TRIAGE_JSON), instructions="Be brief.").instructions == "Be brief."


def test_the_answers_schema_is_strict_and_holds_text_bounds_in_words_for_openai() -> None:
    analysis = load_analysis(str(TRIAGE_JSON))
    item = analysis.item_schema(strict=True)
    assert item["required"] == ["id", *analysis.field_names]
    assert item["additionalProperties"] is False
    summary = item["properties"]["summary"]
    assert "maxLength" not in summary and "minLength" not in summary
    assert summary["description"].endswith("(at least 1 and at most 200 characters)")
    assert analysis.item_schema()["properties"]["summary"]["maxLength"] == 200


# --- what is refused --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ({"type": "number", "description": "d"}, "a number with a fraction is not supported"),
        ({"type": "object", "description": "d"}, "a nested object is not supported"),
        ({"type": ["string", "null"], "description": "d"}, "may be null"),
        ({"type": "string", "description": "d"}, "a string with no usable maxLength"),
        ({"type": "integer", "minimum": 1, "description": "d"}, "an integer with no whole range"),
        ({"type": "integer", "minimum": 5, "maximum": 1, "description": "d"}, "is not usable"),
        ({"type": "string", "enum": [], "description": "d"}, "an enum with no values"),
        ({"type": "string", "enum": ["a", "a"], "description": "d"}, "listed twice"),
        ({"enum": [1, 2], "description": "d"}, "an enum value is not text"),
        ({"type": "array", "items": {"type": "string"}, "description": "d"}, "not enum values"),
        ({"type": "string", "enum": ["a"]}, "it has no description"),
        (
            {"type": "string", "maxLength": 9, "pattern": "^a", "description": "d"},
            "the keyword 'pattern' is not supported",
        ),
    ],
)
def test_an_unsupported_field_is_named_with_what_to_do(field: dict[str, Any], said: str) -> None:
    message = problems(schema(answer=field))
    assert message.startswith("my.json: field 'answer': ")
    assert said in message
    assert " — " in message  # and what to do


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("2nd", "its name is not an identifier"),
        ("has space", "its name is not an identifier"),
        ("id", "taken by postledger's own columns"),
        ("status", "taken by postledger's own columns"),
        ("input_lang", "taken by postledger's own columns"),
    ],
)
def test_a_field_name_that_cannot_be_a_column_is_refused(name: str, said: str) -> None:
    assert said in problems(schema(**{name: {"type": "boolean", "description": "d"}}))


def test_what_openais_strict_mode_refuses_is_refused_first() -> None:
    document = schema(ok={"type": "boolean", "description": "d"})
    document["required"] = []
    assert "not required, and every field must be answered" in problems(document)
    document = schema(ok={"type": "boolean", "description": "d"})
    document["additionalProperties"] = True
    assert "additionalProperties" in problems(document)
    values = [f"v{i}" for i in range(MOST_ENUM_VALUES + 1)]
    many = schema(big={"type": "string", "enum": values, "description": "d"})
    assert f"more than {MOST_ENUM_VALUES}" in problems(many)


def test_a_pydantic_model_with_an_optional_field_or_extra_fields_is_refused() -> None:
    class Optional(BaseModel):
        """Instructions."""

        maybe: bool = Field(default=False, description="d")

    class Open(BaseModel):
        """Instructions."""

        model_config = ConfigDict(extra="allow")
        flag: bool = Field(description="d")

    assert "field 'maybe': it is not required" in problems(Optional.model_json_schema())
    assert "allows properties it does not name" in problems(Open.model_json_schema())


def test_every_problem_is_said_at_once() -> None:
    message = problems(
        schema(a={"type": "number", "description": "d"}, b={"type": "string", "description": "d"})
    )
    assert "field 'a'" in message and "field 'b'" in message


def test_empty_instructions_are_refused(tmp_path: Path) -> None:
    document = schema(ok={"type": "boolean", "description": "d"})
    del document["description"]
    path = tmp_path / "silent.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(AnalysisError, match="the instructions: they are empty"):
        load_analysis(str(path))
    assert load_analysis(str(path), instructions="Say it.").instructions == "Say it."


@pytest.mark.parametrize(
    ("reference", "said"),
    [
        ("missing.json", "there is no such file"),
        ("no_such_module_here:Model", "it cannot be imported"),
        ("json:JSONDecoder", "is not a pydantic model"),
        ("json:Nothing", "json has no Nothing"),
        ("plain words", "it is neither a file nor a model"),
    ],
)
def test_a_reference_that_names_nothing_usable_says_so(
    reference: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AnalysisError, match=said):
        load_analysis(reference)


def test_a_file_that_is_not_json_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "type": "object",\n  oops\n}\n', encoding="utf-8")
    with pytest.raises(AnalysisError) as refused:
        load_analysis(str(path))
    assert str(refused.value).startswith(f"{path}: line 3: it is not JSON")


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps(schema(ok={"type": "boolean", "description": "d"})), "utf-8")
    first = load_analysis(str(path))
    path.write_text(json.dumps(schema(other={"type": "boolean", "description": "dd"})), "utf-8")
    assert load_analysis(str(path)).field_names == ("other",) != first.field_names


def test_the_fields_order_is_not_part_of_their_version() -> None:
    analysis = load_analysis(str(TRIAGE_JSON))
    turned = Analysis(analysis.name, analysis.instructions, tuple(reversed(analysis.fields)))
    assert fields_version(turned) == fields_version(analysis)


def test_a_runs_fixed_analysis_is_the_analysis_it_names() -> None:
    from postledger.settings import Settings

    named = Settings(analysis=str(TRIAGE_JSON), prompt="Be brief.")
    fixed = named.fixed_analysis()
    assert fixed.prompt is None and fixed.analysis and fixed.analysis.startswith("{")
    assert fixed.analysis_in_use() == named.analysis_in_use()
    assert fixed.analysis_in_use().instructions == "Be brief."


# --- what a review found: each is refused, or kept, as the docs say --------------------------


def test_a_list_that_may_repeat_its_values_stays_so_through_a_run() -> None:
    from postledger.settings import Settings

    repeats = {"type": "array", "items": {"type": "string", "enum": ["bug", "idea"]}}
    document = schema(tags={**repeats, "uniqueItems": False, "maxItems": 3, "description": "d"})
    named = Settings(analysis=json.dumps(document))
    for settings in (named, named.fixed_analysis()):
        assert settings.analysis_in_use().check({"tags": ["bug", "bug"]}) == {
            "tags": ["bug", "bug"]
        }
    unique = read_schema(schema(tags={**repeats, "description": "d"}), "x", name="x")
    (field,) = unique.fields
    assert field.schema(strict=True)["description"] == "d (each value at most once)"
    assert field.schema()["uniqueItems"] is True


def test_instructions_given_apart_are_kept_exactly_as_given_for_the_fingerprint() -> None:
    import hashlib

    from postledger.batches.posts import input_parts

    given = "Classify each post.\n"
    parts = input_parts("a post", "m", load_analysis(None, instructions=given))
    assert parts["prompt"] == hashlib.sha256(given.encode()).hexdigest()[:16]  # as before


def test_the_built_in_fields_in_another_order_keep_their_version() -> None:
    document = load_analysis(None).json_schema()
    document["properties"] = dict(reversed(list(document["properties"].items())))
    turned = load_analysis(json.dumps(document))
    assert turned.field_names == ("summary", "sentiment", "category")
    assert fields_version(turned) == "1"


@pytest.mark.parametrize(
    ("field", "said"),
    [
        (
            {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 3, "description": "d"},
            "its minItems and maxItems are not a range",
        ),
        (
            {"type": "array", "items": {"enum": ["a"]}, "minItems": -1, "description": "d"},
            "its minItems and maxItems are not a range",
        ),
        (
            {"type": "array", "items": {"enum": ["a"]}, "uniqueItems": "no", "description": "d"},
            '"uniqueItems" is not true or false',
        ),
        (
            {"type": "array", "items": {"enum": ["a"], "pattern": "x"}, "description": "d"},
            "a list whose items are not enum values",
        ),
        (
            {"type": "array", "items": {"enum": ["a"]}, "uniqueItems": False, "description": "d"},
            "a list with no maxItems",
        ),
        (
            {"type": "string", "maxLength": 5, "minLength": -1, "description": "d"},
            "its minLength is not within its bounds",
        ),
        ({"type": "string", "maxLength": 10**30, "description": "d"}, "no usable maxLength"),
        (
            {"type": "integer", "minimum": 0, "maximum": 10**400, "description": "d"},
            "is not usable",
        ),
        (
            {
                "type": "integer",
                "minimum": 0,
                "exclusiveMinimum": True,
                "maximum": 3,
                "description": "d",
            },
            "an integer with no whole range",
        ),
        ({"type": "boolean", "enum": [True], "description": "d"}, "the keyword 'enum'"),
        ({"type": "string", "enum": ["a"], "maxLength": 3, "description": "d"}, "'maxLength'"),
        (
            {"type": "integer", "minimum": 1, "maximum": 3, "maxLength": 3, "description": "d"},
            "'maxLength'",
        ),
    ],
)
def test_bounds_no_answer_could_meet_or_that_would_go_unchecked_are_refused(
    field: dict[str, Any], said: str
) -> None:
    assert said in problems(schema(answer=field))


def test_both_bounds_of_an_integer_hold_the_tighter_one_winning() -> None:
    field = {
        "type": "integer",
        "minimum": 0,
        "exclusiveMinimum": 5,
        "maximum": 9,
        "description": "d",
    }
    (read,) = read_schema(schema(n=field), "x", name="x").fields
    assert isinstance(read, IntegerField) and (read.minimum, read.maximum) == (6, 9)


def test_a_one_value_literal_is_an_enum_of_one() -> None:
    class One(BaseModel):
        """Say it."""

        kind: Literal["post"] = Field(description="Always a post.")

    (read,) = read_schema(One.model_json_schema(), "One", name="One").fields
    assert read == EnumField("kind", "Always a post.", ("post",))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"required": 5}, '"required" is not a list of names'),
        ({"required": "abc"}, '"required" is not a list of names'),
        ({"$defs": [1]}, '"$defs" is not an object'),
        ({"description": ["x"]}, "its description (the instructions) is not text"),
    ],
)
def test_a_schema_of_the_wrong_shape_is_refused_not_crashed_on(
    change: dict[str, Any], said: str
) -> None:
    document = {**schema(b={"type": "boolean", "description": "d"}), **change}
    assert said in problems(document)


def test_a_module_that_exits_as_it_loads_or_a_path_that_cannot_be_one_is_refused(
    tmp_path: Path,
) -> None:
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nsys.exit(3)\n", encoding="utf-8")
    with pytest.raises(AnalysisError, match="importing it raised SystemExit"):
        load_analysis(f"{exits}:Model")
    with pytest.raises(AnalysisError, match="it cannot be read"):
        load_analysis("bad\x00name.json")
    with pytest.raises(AnalysisError, match="it cannot be read"):
        (tmp_path / "folder.json").mkdir()
        load_analysis(str(tmp_path / "folder.json"))
