"""A Message Batches create body (`{"requests": [...]}`, up to 256 MB) read as it arrives
(`simulator.json_items`): each request checked as it is whole, and written to a file of the
create's, one JSON line each, from which the batch is then made a request at a time. Parsed
whole, a month's body held gigabytes of Python objects.

It refuses what it refused when the whole body was parsed at once, and says the same first:
over 256 MB; not JSON, not an object, or `requests` not a list; no requests; over 100 000;
then the first request (by its index) whose `custom_id` is not 1–64 letters, digits, `_` or
`-`, is used before it, or whose `params` the Messages API would refuse (`problem_of`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from fastapi import Request

from simulator.anthropic_api import problem_of
from simulator.json_items import ListItems
from simulator.spool import Spool, discard, lines_of

MAX_REQUESTS = 100_000
MAX_BYTES = 256 * 1024 * 1024
_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


@dataclass
class CreateBody:
    """A create body, read: its size, whether it was the object asked for, how many requests
    it listed and the first one's problem; its requests on disk (`requests`) while none has
    one."""

    request: Request
    path: Path
    size: int = 0
    listed: bool = False  # JSON, an object, its `requests` a list
    count: int = 0
    first_problem: str | None = None
    _seen: set[str] = field(default_factory=set)
    _out: TextIO | None = None

    def problem(self) -> str | None:
        """Why Anthropic would refuse the create (a 400), or None."""
        if self.size > MAX_BYTES:
            return f"requests: the batch is over {MAX_BYTES} bytes"
        if not self.listed:
            return "requests: Field required"
        if not self.count:
            return "requests: List should have at least 1 item after validation, not 0"
        if self.count > MAX_REQUESTS:
            return f"requests: List should have at most {MAX_REQUESTS} items"
        return self.first_problem

    def requests(self) -> Iterator[dict[str, Any]]:
        """The requests, in order (each checked: a dict with a `custom_id` and its `params`)."""
        for raw in lines_of(self.path):
            request: dict[str, Any] = json.loads(raw)
            yield request

    def written(self) -> None:
        """Every request that arrived is on disk."""
        if self._out is not None:
            self._out.close()
            self._out = None

    def discard(self) -> None:
        if self._out is not None:
            self._out.close()
        discard(self.path)

    def list_began(self) -> None:
        """A `requests` list begins (the last one of the body counts)."""
        self.count, self.first_problem = 0, None
        self._seen.clear()
        if self._out is None:
            self._out = self.path.open("w", encoding="utf-8")
        self._out.seek(0)
        self._out.truncate()

    def add(self, item: Any) -> None:
        index, self.count = self.count, self.count + 1
        if self.first_problem is not None or self.count > MAX_REQUESTS:
            return  # no batch is made of it: the rest is only counted
        custom_id = item.get("custom_id") if isinstance(item, dict) else None
        if not isinstance(custom_id, str) or not _CUSTOM_ID.fullmatch(custom_id):
            self.first_problem = (
                f"requests.{index}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )
        elif custom_id in self._seen:
            self.first_problem = (
                f"Duplicate custom_id: {custom_id!r}; custom_id must be unique in a batch"
            )
        elif (problem := problem_of(self.request, item.get("params"))) is not None:
            self.first_problem = f"requests.{index}.params.{problem}"
        else:
            self._seen.add(custom_id)
            assert self._out is not None
            self._out.write(json.dumps(item) + "\n")  # ASCII: a lone surrogate is kept


async def read_create_body(request: Request, spool: Spool) -> CreateBody:
    """Read the body as it arrives (past 256 MB it is only counted)."""
    body = CreateBody(request, spool.fresh("requests"))
    reader = ListItems("requests", body.list_began, body.add)
    try:
        async for chunk in request.stream():
            body.size += len(chunk)
            if body.size <= MAX_BYTES:
                reader.feed(chunk)
        body.listed = body.size <= MAX_BYTES and reader.close()
    except BaseException:
        body.discard()
        raise
    body.written()
    return body
