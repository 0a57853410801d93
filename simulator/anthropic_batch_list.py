"""GET /v1/messages/batches: the simulator's Message Batches listed as Anthropic lists them, so
that a client can find a batch whose id it never saved.

    GET /v1/messages/batches?limit=20                   the newest `limit` (1–1000, default 20)
    GET /v1/messages/batches?after_id=<id>&limit=20     the page just after that batch: older
    GET /v1/messages/batches?before_id=<id>&limit=20    the page just before it: newer

Newest first, by `created_at` (ties, were there any, by the order they were made), each batch
the very JSON GET /v1/messages/batches/{id} gives. The answer: `{"data": [...], "has_more",
"first_id", "last_id"}`; `first_id` / `last_id` are the page's first and last ids (null on an
empty page), `has_more` whether more lie beyond the page in the direction asked. So the
official client's auto-pagination (`SyncPage`) walks them all: on to `after_id=last_id` (older)
or, paging with `before_id`, to `before_id=first_id` (newer), while `has_more`.

It refuses, with Anthropic's error body, what the other Message Batches routes refuse (a
missing or wrong key: 401 `authentication_error`; no `anthropic-version`, or one that is no
version date: 400), and, as a 400 `invalid_request_error`: a `limit` that is no integer from 1
to 1000, `before_id` and `after_id` both given, and a `before_id` or `after_id` that names no
batch it knows. Its fault route is `list` (`simulator.faults`), as OpenAI's GET /v1/batches:
transport faults (in Anthropic's words: `http_503` a 529), `html`, `cut_json`; with
`per_id=true` its `nth` counts the requests of each cursor (`after_id`, else `before_id`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request, Response

from simulator.anthropic_api import anthropic_error, refused, status_answer
from simulator.anthropic_batch_output import batch_body, root_of
from simulator.anthropic_batch_state import AnthropicBatchState, MessageBatch
from simulator.faults import Route
from simulator.read_faults import answered_early, spoiled_answer

DEFAULT_LIMIT = 20
MAX_LIMIT = 1000
_VERSION = re.compile(r"20\d\d-\d\d-\d\d")
_INTEGER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class PageAsked:
    limit: int
    before_id: str | None
    after_id: str | None

    @property
    def cursor(self) -> str | None:
        """The id it pages from, if any: what a `per_id` fault rule counts by."""
        return self.after_id if self.after_id is not None else self.before_id


def version_problem(request: Request) -> str | None:
    """Why Anthropic would refuse the request's `anthropic-version` header, or None."""
    version = request.headers.get("anthropic-version")
    if not version:
        return "anthropic-version: header is required"
    if not _VERSION.fullmatch(version):
        return f"anthropic-version: {version!r} is not a valid version"
    return None


def page_asked(request: Request) -> PageAsked | str:
    """The page the query asks for, or why it is refused (the message of a 400)."""
    query = request.query_params
    limit = DEFAULT_LIMIT
    if (given := query.get("limit")) is not None:
        if not _INTEGER.fullmatch(given.strip()):
            return "limit: Input should be a valid integer, unable to parse string as an integer"
        limit = int(given)
        if limit < 1:
            return "limit: Input should be greater than or equal to 1"
        if limit > MAX_LIMIT:
            return f"limit: Input should be less than or equal to {MAX_LIMIT}"
    before_id, after_id = query.get("before_id"), query.get("after_id")
    if before_id is not None and after_id is not None:
        return "before_id and after_id cannot both be given: page one way at a time"
    return PageAsked(limit, before_id, after_id)


def newest_first(state: AnthropicBatchState) -> list[MessageBatch]:
    """Every batch the simulator knows, newest first (by `created_at`, then as they were
    made: the later one first)."""
    oldest_first = sorted(state.batches.values(), key=lambda batch: batch.created_at)
    return oldest_first[::-1]


def page_of(state: AnthropicBatchState, asked: PageAsked, root: str) -> dict[str, Any] | Response:
    """The listing's true answer: one page, or the 400 of a cursor that names no batch."""
    batches = newest_first(state)
    ids = [batch.id for batch in batches]
    cursor = asked.cursor
    if cursor is not None and cursor not in ids:
        field = "after_id" if asked.after_id is not None else "before_id"
        return anthropic_error(
            400, "invalid_request_error", f"{field}: no Message Batch with id {cursor!r}"
        )
    if asked.after_id is not None:  # older ones: those after it, the nearest first
        beyond = batches[ids.index(asked.after_id) + 1 :]
        page = beyond[: asked.limit]
    elif asked.before_id is not None:  # newer ones: the nearest `limit` of those before it
        beyond = batches[: ids.index(asked.before_id)]
        page = beyond[-asked.limit :]
    else:
        beyond = batches
        page = beyond[: asked.limit]
    data = [batch_body(state, batch, root) for batch in page]
    return {
        "data": data,
        "has_more": len(beyond) > len(page),
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


def add_list_route(app: FastAPI, state: AnthropicBatchState) -> None:
    upstream, faults = state.upstream, state.faults

    @app.get("/v1/messages/batches")
    async def list_batches(request: Request) -> Any:
        upstream.count_request("list")
        if (refusal := state.denied(request)) is not None:
            return refusal
        if (problem := version_problem(request)) is not None:
            return anthropic_error(400, "invalid_request_error", problem)
        asked = page_asked(request)
        if isinstance(asked, str):
            return anthropic_error(400, "invalid_request_error", asked)
        decision = faults.decide(Route.LIST, asked.cursor)
        if (early := await answered_early(decision, status_answer, refused)) is not None:
            return early
        return spoiled_answer(faults, decision, page_of(state, asked, root_of(request)))
