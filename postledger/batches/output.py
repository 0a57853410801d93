"""The check of a batch's raw output: one verdict per post, by the analysis asked for.

Output is saved *before* it is checked (R4), so this is a pure function over saved text: it can
run again after a crash with the same answer.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from postledger.analysis import Analysis


@dataclass(frozen=True)
class OutputCheck:
    """What a batch's raw output holds: each usable post's result (its fields, by the
    analysis), and why the rest is not usable."""

    valid: dict[str, dict[str, Any]] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)  # post id -> reason
    unusable: str | None = None  # the whole output is unusable, and why


def check_output(raw: str, post_ids: Sequence[str], analysis: Analysis) -> OutputCheck:
    """Split `raw` into one verdict per post of the batch, each answer checked against the
    analysis's fields; never raises on bad output (R41)."""
    try:
        items = json.loads(raw)
    except (ValueError, TypeError, RecursionError) as exc:
        # ValueError covers json's own errors and an integer too long to convert;
        # RecursionError, arrays nested deeper than the interpreter goes.
        items = _complete_items(raw) if isinstance(raw, str) else None
        if not items:
            return OutputCheck(unusable=f"the output is not JSON ({exc})")
        # Cut short (a token limit): the complete items are as good as any; the posts
        # after the cut have no item, and only they are sent again.
    if isinstance(items, dict) and isinstance(items.get("results"), list):
        items = items["results"]  # some models wrap the list; the content is the same
    if not isinstance(items, list):
        return OutputCheck(unusable=f"the output is a JSON {type(items).__name__}, not a list")

    expected = set(post_ids)
    ids = [_item_id(item) for item in items]
    counts = Counter(i for i in ids if i is not None)
    if not any(i in expected for i in ids):
        return OutputCheck(unusable="no item of the output names a post of the batch")

    valid: dict[str, dict[str, Any]] = {}
    fields = set(analysis.field_names)
    invalid: dict[str, str] = {}
    for item, item_id in zip(items, ids, strict=True):
        if item_id is None or item_id not in expected:
            continue  # stray items say nothing about our posts
        if counts[item_id] > 1:
            invalid[item_id] = f"the output has {counts[item_id]} items for this post"
            continue
        if item.get("error") and fields.isdisjoint(item):
            # A per-post request error (the Batch API answers each post on its own).
            invalid[item_id] = f"the upstream failed this post: {item['error']}"
            continue
        result = analysis.check(item)
        if isinstance(result, str):
            invalid[item_id] = "invalid item: " + result
        else:
            valid[item_id] = result
    for post_id in post_ids:
        if post_id not in valid and post_id not in invalid:
            invalid[post_id] = "the output has no item for this post"
    return OutputCheck(valid=valid, invalid=invalid)


_LIST_START = re.compile(r'\[|\{\s*"results"\s*:\s*\[')


def _complete_items(raw: str) -> list[Any] | None:
    """The complete items at the start of a list that was cut short, if it is one: `[{..},
    {..}, {"id": "p7", "cat` gives the first two. None for anything else."""
    text = raw.lstrip()
    opening = _LIST_START.match(text)
    if opening is None:
        return None
    decoder, position = json.JSONDecoder(), opening.end()
    items: list[Any] = []
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        try:
            item, position = decoder.raw_decode(text, position)
        except (ValueError, RecursionError):
            return items or None
        if not isinstance(item, dict):
            return None
        items.append(item)


def _item_id(item: Any) -> str | None:
    """The post an item answers for, as a string: ids are strings end to end, and a model may
    echo the post "1" as the number 1. A boolean is no id, even though Python counts it an int."""
    value = item.get("id") if isinstance(item, dict) else None
    if type(value) is int:
        return str(value)
    return value if isinstance(value, str) else None
