"""Each kind of field read from its JSON Schema node, with only its own keywords: a keyword a
kind does not read is refused, since a bound that is not checked is a bound that is not kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

from postledger.analysis.errors import Problem
from postledger.analysis.fields import (
    AnswerField,
    BooleanField,
    EnumField,
    EnumListField,
    IntegerField,
    TextField,
)

KINDS = (
    "an enum, a string with maxLength, an integer with minimum and maximum, a boolean, or a "
    "list of enum values"
)
# Words for people, on any field.
_ANY = {"type", "description", "title", "examples", "default"}
_OWN = {
    "enum": {"enum", "const"},
    "text": {"maxLength", "minLength"},
    "integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
    "boolean": set(),
    "list": {"items", "minItems", "maxItems", "uniqueItems"},
}
# Far past any answer a post could need, and inside what every reader of the report holds
# (Parquet's int64).
MOST_TEXT = 100_000
INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Node:
    name: str
    description: str
    schema: dict[str, Any]
    defs: dict[str, Any]
    here: str  # "field 'urgency'", for the problems


def typed_field(node: Node, problems: list[Problem]) -> AnswerField | None:
    """The field `node` describes, if its kind is one postledger takes and its keywords are
    that kind's own."""
    schema = node.schema
    kind = schema.get("type")
    field: AnswerField | None
    if ("enum" in schema or "const" in schema) and kind in (None, "string"):
        own, field = "enum", _enum_field(node, problems)
    elif kind == "string":
        own, field = "text", _text(node, problems)
    elif kind == "integer":
        own, field = "integer", _integer(node, problems)
    elif kind == "boolean":
        own, field = "boolean", BooleanField(node.name, node.description)
    elif kind == "array":
        own, field = "list", _enum_list(node, problems)
    else:
        problems.append(Problem(node.here, _unsupported(kind), f"make it {KINDS}"))
        return None
    for keyword in sorted(set(schema) - _ANY - _OWN[own]):
        fix = f"remove it: a field is {KINDS}, with the keywords docs/analysis.md lists"
        problems.append(Problem(node.here, f"the keyword {keyword!r} is not supported", fix))
    return field


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
    if kind is None:
        return "it has no type"
    return f"the type {kind!r} is not supported"


def _enum_field(node: Node, problems: list[Problem]) -> EnumField | None:
    schema = node.schema
    values = schema["enum"] if "enum" in schema else [schema["const"]]
    if "const" in schema and values != [schema["const"]]:
        problems.append(Problem(node.here, "its const is not its one enum value", "drop const"))
        return None
    checked = enum_values(values, node.here, problems)
    return EnumField(node.name, node.description, checked) if checked else None


def _text(node: Node, problems: list[Problem]) -> TextField | None:
    most, least = node.schema.get("maxLength"), node.schema.get("minLength", 0)
    if not whole(most) or not 1 <= most <= MOST_TEXT:
        fix = (
            f'give it a "maxLength" from 1 to {MOST_TEXT} (in pydantic: Field(max_length=...)): '
            "an unbounded answer is an unbounded cost"
        )
        problems.append(Problem(node.here, "a string with no usable maxLength", fix))
        return None
    if not whole(least) or not 0 <= least <= most:
        fix = "make it a whole number from 0 to the maxLength"
        problems.append(Problem(node.here, "its minLength is not within its bounds", fix))
        return None
    return TextField(node.name, node.description, max_length=most, min_length=least)


def _integer(node: Node, problems: list[Problem]) -> IntegerField | None:
    """Both the inclusive and the exclusive bounds hold where both are given: the tighter
    one wins."""
    schema = node.schema
    lows = [schema.get("minimum"), _past(schema.get("exclusiveMinimum"), +1)]
    highs = [schema.get("maximum"), _past(schema.get("exclusiveMaximum"), -1)]
    given = [v for v in (*lows, *highs) if v is not None]
    lows, highs = [v for v in lows if v is not None], [v for v in highs if v is not None]
    if not lows or not highs or not all(whole(v) for v in given):
        fix = 'give it whole "minimum" and "maximum" (in pydantic: Field(ge=..., le=...))'
        problems.append(Problem(node.here, "an integer with no whole range", fix))
        return None
    least, most = max(lows), min(highs)
    if not INT64[0] <= least <= most <= INT64[1]:
        fix = "make the minimum at most the maximum, both within 64-bit integers"
        problems.append(Problem(node.here, f"its range {least}..{most} is not usable", fix))
        return None
    return IntegerField(node.name, node.description, minimum=least, maximum=most)


def _past(bound: Any, step: int) -> Any:
    """An exclusive bound as an inclusive one (an old-style boolean one is not a bound)."""
    return bound + step if whole(bound) else (None if bound is None else bound)


def _enum_list(node: Node, problems: list[Problem]) -> EnumListField | None:
    schema = node.schema
    items = resolved_node(schema.get("items"), node.defs)
    wrong_items = items is None or "enum" not in items or items.get("type", "string") != "string"
    if items is None or wrong_items or set(items) - {"type", "enum", "title", "description"}:
        fix = 'give it "items": {"type": "string", "enum": [...]} (in pydantic: list[SomeEnum])'
        problems.append(Problem(node.here, "a list whose items are not enum values", fix))
        return None
    values = enum_values(items["enum"], node.here, problems)
    if not values:
        return None
    unique = schema.get("uniqueItems", True)
    least, most = schema.get("minItems", 0), schema.get("maxItems")
    ceiling = len(values) if unique is True else None
    if not isinstance(unique, bool):
        problems.append(Problem(node.here, '"uniqueItems" is not true or false', "fix it"))
        return None
    if most is None and ceiling is None:
        fix = 'give it a "maxItems" (a list that may repeat values needs a bound)'
        problems.append(Problem(node.here, "a list with no maxItems", fix))
        return None
    top = min(v for v in (most, ceiling) if v is not None)
    if not whole(least) or (most is not None and not whole(most)) or not 0 <= least <= top:
        fix = f"make minItems a whole number from 0 to {top}, and maxItems at least 1"
        problems.append(Problem(node.here, "its minItems and maxItems are not a range", fix))
        return None
    if top < 1:
        problems.append(Problem(node.here, "its maxItems is 0", "make it at least 1"))
        return None
    return EnumListField(node.name, node.description, values, least, top, unique)


def enum_values(values: Any, here: str, problems: list[Problem]) -> tuple[str, ...] | None:
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


def whole(value: Any) -> TypeGuard[int]:
    return type(value) is int


def resolved_node(node: Any, defs: dict[str, Any]) -> dict[str, Any] | None:
    """A property with its `$ref` (pydantic's enums) replaced by what it names; its own
    keywords (the field's description) win over the referenced ones. One level: a reference
    to a reference is not read (an analysis is flat)."""
    if not isinstance(node, dict):
        return None
    node = {str(key): value for key, value in node.items()}
    all_of = node.pop("allOf", None)
    if all_of is not None:
        if not (isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict)):
            return None
        node = {**all_of[0], **node}  # pydantic < 2.9 wraps a described $ref this way
    reference = node.pop("$ref", None)
    if reference is None:
        plain: dict[str, Any] = node
        return plain
    target = defs.get(reference.rpartition("/")[2]) if isinstance(reference, str) else None
    if not isinstance(target, dict) or "$ref" in target or "allOf" in target:
        return None
    merged: dict[str, Any] = {**target, **node}
    return merged
