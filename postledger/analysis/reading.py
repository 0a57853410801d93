"""A JSON Schema read as an analysis: the one reader of both ways a user writes one (a JSON
Schema file, or a pydantic model's `model_json_schema()`), saying every problem at once.

What it takes is deliberately small and flat (docs/analysis.md): an object whose properties are
the fields, each an enum, a bounded string, an integer in a range, a boolean or a list of enum
values, each required and described. Anything else is refused with what to write instead, so
that a schema never reaches a provider that would refuse it, and no bound goes unchecked.
"""

from __future__ import annotations

import re
from typing import Any, TypeGuard

from postledger.analysis.description import ITEM_ID, Analysis
from postledger.analysis.errors import AnalysisError, Problem
from postledger.analysis.fields import (
    AnswerField,
    BooleanField,
    EnumField,
    EnumListField,
    IntegerField,
    TextField,
)
from postledger.analysis.strict import strict_problems

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# Names the answer or the report already uses for something else.
RESERVED = {ITEM_ID, "error", "text", "status", "failure_kind", "failure_reason", "attempts"}
RESERVED_PREFIXES = ("input_", "cost_", "wasted_")
# Keywords a field may carry: the ones read below, and words for people.
KNOWN = {
    "type", "description", "title", "enum", "maxLength", "minLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "items", "minItems", "maxItems", "uniqueItems",
    "examples", "default",
}  # fmt: skip
KINDS = (
    "an enum, a string with maxLength, an integer with minimum and maximum, a boolean, or a "
    "list of enum values"
)


def read_schema(document: Any, source: str, *, name: str) -> Analysis:
    """The analysis `document` describes; raises AnalysisError naming `source` and every
    problem. `name`: the analysis's name when the schema has no title."""
    problems: list[Problem] = []
    here = "the schema"
    if not isinstance(document, dict):
        raise AnalysisError(source, [Problem(here, "it is not a JSON object", _AN_OBJECT)])
    defs = {**(document.get("definitions") or {}), **(document.get("$defs") or {})}
    if document.get("type", "object") != "object":
        problems.append(Problem(here, f"its type is {document.get('type')!r}", _AN_OBJECT))
    if document.get("additionalProperties", False) is not False:
        fix = 'set "additionalProperties": false (in pydantic, do not set extra="allow")'
        problems.append(Problem(here, "it allows properties it does not name", fix))
    properties = document.get("properties")
    if not isinstance(properties, dict) or not properties:
        problems.append(Problem(here, "it has no properties", _AN_OBJECT))
        properties = {}
    required = document.get("required") or []
    fields = []
    for field_name, node in properties.items():
        field = _field(str(field_name), node, defs, required, problems)
        if field is not None:
            fields.append(field)
    title = document.get("title")
    analysis = Analysis(
        name=title.strip() if isinstance(title, str) and title.strip() else name,
        instructions=str(document.get("description") or "").strip(),
        fields=tuple(fields),
    )
    if not problems:
        problems = strict_problems(analysis)
    if problems:
        raise AnalysisError(source, problems)
    return analysis


_AN_OBJECT = (
    'write {"type": "object", "properties": {...}, "required": [...]}, one property per field'
)


def _field(
    name: str, node: Any, defs: dict[str, Any], required: list[Any], problems: list[Problem]
) -> AnswerField | None:
    here = f"field {name!r}"
    start = len(problems)
    if not NAME.fullmatch(name):
        fix = "name it with letters, digits and _ (not starting with a digit), at most 64"
        problems.append(Problem(here, "its name is not an identifier", fix))
    elif name in RESERVED or name.startswith(RESERVED_PREFIXES):
        fix = "give it another name"
        problems.append(Problem(here, "its name is taken by postledger's own columns", fix))
    if name not in required:
        fix = (
            'add it to "required" (in pydantic: give it no default); a field that may be '
            'empty can be an enum with a value such as "unknown"'
        )
        problems.append(Problem(here, "it is not required, and every field must be answered", fix))
    node = _resolved(node, defs)
    if node is None:
        problems.append(Problem(here, "its schema cannot be read", f"make it {KINDS}"))
        return None
    description = node.get("description")
    if not isinstance(description, str) or not description.strip():
        fix = (
            'add a "description" (in pydantic: Field(description=...)): it is what the model reads'
        )
        problems.append(Problem(here, "it has no description", fix))
    for keyword in sorted(set(node) - KNOWN):
        fix = f"remove it: a field is {KINDS}"
        problems.append(Problem(here, f"the keyword {keyword!r} is not supported", fix))
    field = _typed(name, str(description or "").strip(), node, defs, here, problems)
    return field if len(problems) == start else None


def _typed(
    name: str,
    description: str,
    node: dict[str, Any],
    defs: dict[str, Any],
    here: str,
    problems: list[Problem],
) -> AnswerField | None:
    kind = node.get("type")
    if "enum" in node and kind in (None, "string"):
        values = _enum(node["enum"], here, problems)
        return EnumField(name, description, values) if values else None
    if kind == "string":
        most, least = node.get("maxLength"), node.get("minLength", 0)
        if not _whole(most) or most < 1:
            fix = (
                'give it a "maxLength" (in pydantic: Field(max_length=...)): an unbounded '
                "answer is an unbounded cost"
            )
            problems.append(Problem(here, "a string with no maxLength", fix))
            return None
        if not _whole(least) or least > most:
            problems.append(Problem(here, "its minLength is above its maxLength", "lower it"))
            return None
        return TextField(name, description, max_length=most, min_length=least)
    if kind == "integer":
        return _integer(name, description, node, here, problems)
    if kind == "boolean":
        return BooleanField(name, description)
    if kind == "array":
        return _enum_list(name, description, node, defs, here, problems)
    problems.append(Problem(here, _unsupported(kind), f"make it {KINDS}"))
    return None


def _unsupported(kind: Any) -> str:
    if kind == "number":
        return (
            "a number with a fraction is not supported (use an integer in a range, e.g. a "
            "score 1-5)"
        )
    if kind == "object":
        return "a nested object is not supported (flatten it into fields of their own)"
    if isinstance(kind, list) or kind == "null":
        return "a field that may be null is not supported (every field is answered)"
    return f"the type {kind!r} is not supported"


def _integer(
    name: str, description: str, node: dict[str, Any], here: str, problems: list[Problem]
) -> IntegerField | None:
    least = node.get("minimum")
    if least is None and _whole(node.get("exclusiveMinimum")):
        least = node["exclusiveMinimum"] + 1
    most = node.get("maximum")
    if most is None and _whole(node.get("exclusiveMaximum")):
        most = node["exclusiveMaximum"] - 1
    if not _whole(least) or not _whole(most):
        fix = 'give it whole "minimum" and "maximum" (in pydantic: Field(ge=..., le=...))'
        problems.append(Problem(here, "an integer with no range", fix))
        return None
    if least > most:
        problems.append(Problem(here, f"its range {least}..{most} is empty", "swap the bounds"))
        return None
    return IntegerField(name, description, minimum=least, maximum=most)


def _enum_list(
    name: str,
    description: str,
    node: dict[str, Any],
    defs: dict[str, Any],
    here: str,
    problems: list[Problem],
) -> EnumListField | None:
    items = _resolved(node.get("items"), defs)
    if items is None or "enum" not in items or items.get("type", "string") != "string":
        fix = 'give it "items": {"type": "string", "enum": [...]} (in pydantic: list[SomeEnum])'
        problems.append(Problem(here, "a list whose items are not enum values", fix))
        return None
    values = _enum(items["enum"], here, problems)
    if not values:
        return None
    least, most = node.get("minItems", 0), node.get("maxItems")
    unique = node.get("uniqueItems", True) is not False
    if not _whole(least) or (most is not None and (not _whole(most) or most < least)):
        problems.append(Problem(here, "its minItems and maxItems are not a range", "fix them"))
        return None
    return EnumListField(name, description, values, least, most, unique)


def _enum(values: Any, here: str, problems: list[Problem]) -> tuple[str, ...] | None:
    if not isinstance(values, list) or not values:
        problems.append(Problem(here, "an enum with no values", "list its values"))
        return None
    if not all(isinstance(v, str) and v for v in values):
        fix = 'write every value as non-empty text (a number as text, e.g. "1")'
        problems.append(Problem(here, "an enum value is not text", fix))
        return None
    if len(set(values)) != len(values):
        problems.append(Problem(here, "an enum value is listed twice", "list each value once"))
        return None
    return tuple(values)


def _resolved(node: Any, defs: dict[str, Any]) -> dict[str, Any] | None:
    """A property with its `$ref` (pydantic's enums and models) replaced by what it names; its
    own keywords (the field's description) win over the referenced ones."""
    if not isinstance(node, dict):
        return None
    node = dict(node)
    all_of = node.pop("allOf", None)
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        node = {**all_of[0], **node}  # pydantic < 2.9 wraps a described $ref this way
    reference = node.pop("$ref", None)
    if reference is None:
        return node if all_of is None or len(all_of) == 1 else None
    target = defs.get(str(reference).rpartition("/")[2]) if isinstance(reference, str) else None
    return {**target, **node} if isinstance(target, dict) else None


def _whole(value: Any) -> TypeGuard[int]:
    return type(value) is int
