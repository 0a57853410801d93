"""One item of an answer spoiled in its analysis's own shape (`simulator.outputs`): each spoil
breaks the item as a model would, whatever fields the analysis asks for, and the default
analysis's spoils stay those it always had.
"""

from __future__ import annotations

from typing import Any

from postledger.analysis import (
    Analysis,
    AnswerField,
    BooleanField,
    EnumField,
    EnumListField,
    IntegerField,
    TextField,
)
from simulator.analyses import is_default
from simulator.answers import fitted

OUTSIDE = "ecstatic"  # a value no enum of the default analysis has
SECOND_ANSWER = "A second, different answer for the same post."


def shown_field(analysis: Analysis) -> str:
    """The field an answer of the wrong shape lists: its first text field (the default's
    summary), or its first field."""
    text = _text_fields(analysis)
    return text[0].name if text else analysis.fields[0].name


def with_bad_value(analysis: Analysis, item: dict[str, Any]) -> dict[str, Any]:
    """The item with a value its field does not allow: an enum's value outside its values
    (its last enum, which is the default analysis's sentiment), or, with no enum, a value of
    another kind."""
    if is_default(analysis):
        return {**item, "sentiment": OUTSIDE}
    enums = [field for field in analysis.fields if isinstance(field, EnumField)]
    lists = [field for field in analysis.fields if isinstance(field, EnumListField)]
    field = (enums[-1:] or lists[:1] or [analysis.fields[0]])[0]
    return {**item, field.name: _wrong(field)}


def without_field(analysis: Analysis, item: dict[str, Any]) -> dict[str, Any]:
    """The item without its first field."""
    missing = analysis.fields[0].name
    return {key: value for key, value in item.items() if key != missing}


def with_long_string(analysis: Analysis, item: dict[str, Any]) -> dict[str, Any]:
    """The item with its first text field one character past its bound (no text field: a
    bad value, as `with_bad_value`)."""
    text = _text_fields(analysis)
    if not text:
        return with_bad_value(analysis, item)
    field = text[0]
    value = item.get(field.name)
    base = value if isinstance(value, str) and value else "x"
    repeats = field.max_length // (len(base) + 1) + 2
    return {**item, field.name: " ".join([base] * repeats)[: field.max_length + 1]}


def second_answer(analysis: Analysis, item: dict[str, Any]) -> dict[str, Any]:
    """Another valid answer for the same post: its first text field says something else (the
    default's summary), or, with none, its first field holds another value where it can."""
    text = _text_fields(analysis)
    if text:
        return {**item, text[0].name: fitted(SECOND_ANSWER, text[0])}
    field = analysis.fields[0]
    return {**item, field.name: _other(field, item.get(field.name))}


def _text_fields(analysis: Analysis) -> list[TextField]:
    return [field for field in analysis.fields if isinstance(field, TextField)]


def _outside(values: tuple[str, ...]) -> str:
    value = OUTSIDE
    while value in values:
        value += "!"
    return value


def _wrong(field: AnswerField) -> Any:
    if isinstance(field, EnumField):
        return _outside(field.values)
    if isinstance(field, EnumListField):
        return [_outside(field.values)]
    if isinstance(field, IntegerField):
        return field.maximum + 1
    if isinstance(field, BooleanField):
        return "yes"
    return 0  # a text field given a number


def _other(field: AnswerField, value: Any) -> Any:
    """A valid value of `field` other than `value`, if there is one."""
    if isinstance(field, EnumField):
        index = field.values.index(value) if value in field.values else -1
        return field.values[(index + 1) % len(field.values)]
    if isinstance(field, BooleanField):
        return not value
    if isinstance(field, IntegerField):
        return field.minimum if value != field.minimum else field.maximum
    if isinstance(field, EnumListField) and isinstance(value, list):
        if len(value) > field.min_items:
            return value[:-1]
        spare = [v for v in field.values if v not in value]
        if spare and len(value) < field.most:
            return [*value, spare[0]]
    return value
