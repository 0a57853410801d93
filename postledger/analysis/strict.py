"""The limits of OpenAI's strict structured outputs, checked before anything is sent.

From OpenAI's guide "Structured model outputs", section "Supported schemas" (the numbers as it
gives them in 2026; earlier versions of the guide gave 100 properties and 5 levels): a schema
may have up to 5 000 object properties in all, with up to 10 levels of nesting; up to 1 000
enum values across all its enums; the names of its properties and definitions and its enum and
const values may not exceed 120 000 characters in all; and one enum with more than 250 string
values may not exceed 15 000 characters of them. Every property must be required and every
object must say `additionalProperties: false` (the reader refuses anything else; postledger's
own wrapper obeys both). An analysis is flat (the answer's object, its list, each post's object,
a field, a list's items: 5 levels at most), so the depth limit is never reached.
"""

from __future__ import annotations

from postledger.analysis.description import ITEM_ID, Analysis
from postledger.analysis.errors import Problem
from postledger.analysis.fields import EnumField, EnumListField

MOST_PROPERTIES = 5_000
MOST_ENUM_VALUES = 1_000
MOST_SCHEMA_CHARACTERS = 120_000
LONG_ENUM = 250  # values
MOST_LONG_ENUM_CHARACTERS = 15_000
# The answer's own object ({"results": [...]}) and each post's id, beside the fields.
WRAPPER_PROPERTIES = ("results", ITEM_ID)

OPENAI_STRICT = "OpenAI's strict structured outputs (openai_chat and openai_batch) refuse"


def strict_problems(analysis: Analysis) -> list[Problem]:
    """What in `analysis` OpenAI's strict mode would refuse, each with what to do."""
    problems: list[Problem] = []
    here = "the schema"
    enums = [f.values for f in analysis.fields if isinstance(f, EnumField | EnumListField)]
    properties = len(analysis.fields) + len(WRAPPER_PROPERTIES)
    if properties > MOST_PROPERTIES:
        what = (
            f"{properties} properties (with postledger's two): {OPENAI_STRICT} more than "
            f"{MOST_PROPERTIES}"
        )
        problems.append(Problem(here, what, "ask for fewer fields, or split the analysis in two"))
    values = sum(len(v) for v in enums)
    if values > MOST_ENUM_VALUES:
        what = f"{values} enum values in all: {OPENAI_STRICT} more than {MOST_ENUM_VALUES}"
        problems.append(Problem(here, what, "use fewer values, or a bounded string instead"))
    characters = sum(len(name) for name in (*WRAPPER_PROPERTIES, *analysis.field_names))
    characters += sum(len(value) for v in enums for value in v)
    if characters > MOST_SCHEMA_CHARACTERS:
        what = (
            f"{characters} characters of field names and enum values: {OPENAI_STRICT} more "
            f"than {MOST_SCHEMA_CHARACTERS}"
        )
        problems.append(Problem(here, what, "use fewer or shorter values"))
    for field in analysis.fields:
        if isinstance(field, EnumField | EnumListField) and len(field.values) > LONG_ENUM:
            long = sum(len(value) for value in field.values)
            if long > MOST_LONG_ENUM_CHARACTERS:
                what = (
                    f"{len(field.values)} values of {long} characters: {OPENAI_STRICT} an enum "
                    f"of more than {LONG_ENUM} values longer than {MOST_LONG_ENUM_CHARACTERS}"
                )
                fix = "use fewer or shorter values"
                problems.append(Problem(f"field {field.name!r}", what, fix))
    return problems
