"""The simulator's answer to any analysis, field by field, from the post's id and text alone.

Each value is drawn by a stable hash of (post id, text, field name): the same post asked the
same analysis gets the same answer in every process and every run (hashlib, not Python's
`hash`, which is salted per process). A text field is the post's first sentence, fitted to
the field's bounds.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from postledger.analysis import (
    ITEM_ID,
    Analysis,
    AnswerField,
    BooleanField,
    EnumField,
    EnumListField,
    IntegerField,
    TextField,
)

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
# The longest summary the default analysis's answer writes.
SUMMARY_CHARS = 140
_PAD = "."


def first_sentence(text: str) -> str:
    first = next((part.strip() for part in _SENTENCE_END.split(text) if part.strip()), text)
    return " ".join(first.split())


def cut(text: str, most: int) -> str:
    """`text` in at most `most` characters, an ellipsis saying it was cut."""
    if len(text) <= most:
        return text
    return text[: most - 1].rstrip() + "…" if most > 1 else text[:most]


def fitted(text: str, field: TextField) -> str:
    """The first sentence of `text`, within the field's bounds (padded up to its least)."""
    value = cut(first_sentence(text), field.max_length)
    return value.ljust(field.min_length, _PAD)


def stable(*parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def answer_item(analysis: Analysis, post_id: str, text: str) -> dict[str, Any]:
    """One post's answer: its id, then each field in the analysis's order."""
    item: dict[str, Any] = {ITEM_ID: post_id}
    for field in analysis.fields:
        item[field.name] = field_value(field, post_id, text)
    return item


def field_value(field: AnswerField, post_id: str, text: str) -> Any:
    draw = stable(post_id, text, field.name)
    if isinstance(field, EnumField):
        return field.values[draw % len(field.values)]
    if isinstance(field, TextField):
        return fitted(text, field)
    if isinstance(field, IntegerField):
        return field.minimum + draw % (field.maximum - field.minimum + 1)
    if isinstance(field, BooleanField):
        return draw % 2 == 1
    return _chosen(field, post_id, text, draw)


def _chosen(field: EnumListField, post_id: str, text: str, draw: int) -> list[str]:
    """Some of the field's values, as many as its bounds allow, listed in its own order."""
    values = field.values
    most = min(field.most, len(values)) if field.unique else field.most
    least = min(field.min_items, most)
    count = least + draw % (most - least + 1)
    ranked = sorted(values, key=lambda value: stable(post_id, text, field.name, value))
    if count > len(values):  # more than there are values, only where repeats are allowed
        return [ranked[index % len(ranked)] for index in range(count)]
    picked = set(ranked[:count])
    return [value for value in values if value in picked]
