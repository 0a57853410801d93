"""What an OpenAI batch's lines hold, kept on disk while the batch runs: one JSON line per valid
line of its input file (`LineRecord`), written as the batch is made
(`simulator.openai_batch_scan`) and read again, a line at a time, when it is finished
(`simulator.openai_batch_finish`). A month's job is ~20 000 lines of 25 posts: held in memory,
their posts and answers took gigabytes.

A batch's answers were its whole output split by post id: a request's answer is every item of
the batch's output that names one of its posts, and a request's prompt counts the text of the
last post of each id it carries. Where each post id is carried once and each item names its
own post, that is the request's own items, which is how they are read back here. A post id
carried more than once (`dups`), or named by an item an output fault spoiled (`spoiled`), is
looked up across the whole batch instead (`gathered`), before the answers are written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from simulator.faults import Decision, Faults, Route
from simulator.outputs import spoil_output
from simulator.spool import lines_of


@dataclass(frozen=True)
class LineRecord:
    """One valid line of an input file: its custom_id, whether its strict schema was refused,
    its posts' ids and each one's text tokens, and (a line that runs) each post's answer item
    as the model wrote it (unspoiled)."""

    custom_id: str
    refused: bool
    post_ids: list[str]
    tokens: list[int]
    items: list[Any]

    def dumps(self) -> str:
        # ASCII: a post's text may hold a lone surrogate, which UTF-8 cannot write.
        return json.dumps([self.custom_id, self.refused, self.post_ids, self.tokens, self.items])

    @classmethod
    def loads(cls, raw: bytes) -> LineRecord:
        custom_id, refused, post_ids, tokens, items = json.loads(raw)
        return cls(custom_id, refused, post_ids, tokens, items)


@dataclass(frozen=True)
class SpoiledItem:
    """The item an output fault spoiled: the running post's index (in the running posts'
    order), its id, and the items that stand in its place (none, one, or two)."""

    index: int
    post_id: str
    items: list[Any]


@dataclass(frozen=True)
class BatchLines:
    """A batch's lines file, and what its answers need beside it. Shared by the batches made
    of one create's input (a gateway's extra attempts): each has its own `spoiled`."""

    path: Path
    prompt_tokens: int  # the tokens of the prompt (the first running line's system messages)
    dups: frozenset[str]  # post ids more than one post of the file carries
    spoiled: SpoiledItem | None = None
    named: frozenset[str] = frozenset()  # other post ids the spoiled items name

    def records(self) -> Iterator[LineRecord]:
        for raw in lines_of(self.path):
            yield LineRecord.loads(raw)

    @property
    def special(self) -> frozenset[str]:
        """The post ids whose items are looked up across the batch (`gathered`)."""
        spoiled = {self.spoiled.post_id} if self.spoiled is not None else set()
        return self.dups | self.named | spoiled

    def answers_at(self, index: int, item: Any) -> list[Any]:
        """The items the running post at `index` stands for in the output."""
        if self.spoiled is not None and self.spoiled.index == index:
            return self.spoiled.items
        return [item]

    def running(self) -> Iterator[tuple[int, str, int, Any]]:
        """Each running post: (its index, its id, its text tokens, its item)."""
        index = 0
        for record in self.records():
            if record.refused:
                continue
            for post_id, tokens, item in zip(
                record.post_ids, record.tokens, record.items, strict=True
            ):
                yield index, post_id, tokens, item
                index += 1


@dataclass(frozen=True)
class Gathered:
    """For each special post id: the output's items that name it, in order, and the tokens of
    the last running post of that id (the text a lookup by id found)."""

    items: dict[str, list[Any]]
    tokens: dict[str, int]


def gathered(lines: BatchLines) -> Gathered:
    """One pass over the lines, only when some post id is special."""
    special = lines.special
    found = Gathered({}, {})
    if not special:
        return found
    for index, post_id, tokens, item in lines.running():
        for answer in lines.answers_at(index, item):
            named = answer.get("id") if isinstance(answer, dict) else None
            if isinstance(named, str) and named in special:
                found.items.setdefault(named, []).append(answer)
        if post_id in special:
            found.tokens[post_id] = tokens
    return found


def with_spoiled_item(
    lines: BatchLines,
    faults: Faults,
    decision: Decision,
    count: int,
    known: set[str],
    schema: dict[str, Any] | None,
) -> BatchLines:
    """The lines with one item of the output spoiled by a one-item output fault, picked as it
    was picked from the whole output (`count` items: one draw), its post noted in `fired`;
    `known`: every post id of the file, which a spoiled item may come to name."""
    index = faults.pick(Route.OUTPUT, count)
    post_id, item = next((pid, item) for at, pid, _, item in lines.running() if at == index)
    spoiled = spoil_output(
        json.dumps([item], ensure_ascii=False), decision.fault, lambda _route, _size: 0, schema
    )
    if spoiled.post_id is not None:
        faults.note(decision, post_id=spoiled.post_id)
    items = json.loads(spoiled.text)
    named = {
        answer["id"]
        for answer in items
        if isinstance(answer, dict) and isinstance(answer.get("id"), str) and answer["id"] in known
    }
    return replace(lines, spoiled=SpoiledItem(index, post_id, items), named=frozenset(named))
