"""The simulator's Anthropic Message Batches API, over the same tasks, fault injection and charge
log as its other faces.

POST /v1/messages/batches                 {"requests": [{"custom_id", "params"}]}: a batch
GET  /v1/messages/batches                 every batch, newest first, a page at a time
                                          (`simulator.anthropic_batch_list`)
GET  /v1/messages/batches/{id}            its processing_status, request_counts, results_url
GET  /v1/messages/batches/{id}/results    JSONL, one line per request, once it ended
POST /v1/messages/batches/{id}/cancel     ends it: requests not yet run are `canceled`

It refuses what Anthropic refuses, with Anthropic's error body: no requests, over 100 000 of
them or over 256 MB, a `custom_id` that is not 1–64 letters, digits, `_` or `-`, or is used
twice, and any request whose `params` the Messages API would refuse (`problem_of`). Each
request is run as one Messages API call would be. Requests that do not succeed are not billed,
as Anthropic bills only the ones that did: a `task:task_failed` fault makes a request
`errored`, `task:expired` makes it `expired`, `task:cancelled` `canceled`; a request a
cancel stops before its end is `canceled` and its charge is taken back. Create faults are
the Messages API's; a `poll:forget` loses the batch (404 `not_found_error`). Its `poll` is
GET /v1/messages/batches/{id}, its `results` GET /v1/messages/batches/{id}/results, its
`list` GET /v1/messages/batches (their read faults, `poll:foreign_results_url` among them:
`simulator.read_faults`).

The batches its routes share are one `simulator.anthropic_batch_state.AnthropicBatchState`;
what a batch shows, its body and its results file, is `simulator.anthropic_batch_output`'s.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request, Response

from simulator.analyses import messages_item_schema
from simulator.anthropic_api import (
    anthropic_error,
    before_create,
    forced_tool,
    problem_of,
    refused,
    status_answer,
    system_text,
)
from simulator.anthropic_batch_list import add_list_route
from simulator.anthropic_batch_output import batch_body, results_jsonl, root_of
from simulator.anthropic_batch_state import AnthropicBatchState, BatchRequest, MessageBatch
from simulator.faults import Faults, Route
from simulator.gateway import Made, through_gateway
from simulator.openai_chat import chat_input
from simulator.outputs import spoiled_by
from simulator.read_faults import answered_early, spoiled_answer, spoiled_file
from simulator.responses import transport_fault
from simulator.upstream import SimTask, Upstream

MAX_REQUESTS = 100_000
MAX_BYTES = 256 * 1024 * 1024
_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
# What a task fault makes of a request: it does not succeed, and is not billed.
_FATE = {"task_failed": "errored", "expired": "expired", "cancelled": "canceled"}


def _batch_problem(request: Request, raw: bytes, body: Any) -> str | None:
    if len(raw) > MAX_BYTES:
        return f"requests: the batch is over {MAX_BYTES} bytes"
    if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
        return "requests: Field required"
    requests = body["requests"]
    if not requests:
        return "requests: List should have at least 1 item after validation, not 0"
    if len(requests) > MAX_REQUESTS:
        return f"requests: List should have at most {MAX_REQUESTS} items"
    seen: set[str] = set()
    for index, item in enumerate(requests):
        custom_id = item.get("custom_id") if isinstance(item, dict) else None
        if not isinstance(custom_id, str) or not _CUSTOM_ID.fullmatch(custom_id):
            return (
                f"requests.{index}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )
        if custom_id in seen:
            return f"Duplicate custom_id: {custom_id!r}; custom_id must be unique in a batch"
        seen.add(custom_id)
        if (problem := problem_of(request, item.get("params"))) is not None:
            return f"requests.{index}.params.{problem}"
    return None


def _run(
    state: AnthropicBatchState,
    batch_id: str,
    custom_id: str,
    params: dict[str, Any],
    faulted: bool,
) -> BatchRequest:
    """One request of a batch, run; `faulted=False`: it meets no task or output fault."""
    upstream, faults = state.upstream, state.faults
    system = {"role": "system", "content": system_text(params.get("system"))}
    prompt, posts = chat_input([system, *params["messages"]])
    model, tool = str(params["model"]), forced_tool(params)
    # No task id: a request a task fault keeps from running is never charged.
    task_fault = (
        faults.decide(Route.TASK, batch_id=batch_id, custom_id=custom_id) if faulted else None
    )
    if task_fault is not None and task_fault.fault in _FATE:
        now = time.monotonic()  # it never runs: no task upstream, nothing billed
        unbilled = SimTask(
            f"task_{uuid.uuid4().hex}",
            None,
            model,
            prompt,
            posts,
            now,
            now + upstream.latency,
            "",
            0,
            0,
            task_fault.fault,
        )
        return BatchRequest(custom_id, unbilled, tool, _FATE[task_fault.fault])
    task, _ = upstream.create(
        model=model,
        prompt=prompt,
        posts=posts,
        idempotency_key=custom_id,  # written in the charge log only: no keys here
        now=time.monotonic(),
        on_new=spoiled_by(faults, batch_id=batch_id, custom_id=custom_id) if faulted else None,
        honour_key=False,
        schema=messages_item_schema(params),
    )
    return BatchRequest(custom_id, task, tool)


def _new_batch(
    state: AnthropicBatchState, requests: list[dict[str, Any]], *, faulted: bool = True
) -> MessageBatch:
    batch_id = f"msgbatch_{uuid.uuid4().hex[:24]}"
    created_at, started = state.created_now(), time.monotonic()
    batch = MessageBatch(
        id=batch_id,
        requests=[
            _run(state, batch_id, item["custom_id"], item["params"], faulted) for item in requests
        ],
        created_at=created_at,
        started=started,
    )
    state.batches[batch.id] = batch
    return batch


def _batch_again(state: AnthropicBatchState, requests: list[dict[str, Any]]) -> Made:
    """A gateway's extra attempt: another Message Batch, each of its requests charged."""
    batch = _new_batch(state, requests, faulted=False)
    return Made([request.task.task_id for request in batch.requests], batch.id)


def _results_file(state: AnthropicBatchState, request: Request, batch_id: str) -> Response | bytes:
    """The true answer of a results download: its JSONL bytes, or the error."""
    batch = state.found(request, batch_id)
    if isinstance(batch, Response):
        return batch
    if not batch.ended(time.monotonic()):
        return anthropic_error(
            400, "invalid_request_error", f"Message Batch {batch_id} has not ended yet"
        )
    batch_body(state, batch, root_of(request))  # writes the results once
    return results_jsonl(batch)


def add_anthropic_batch_routes(
    app: FastAPI, upstream: Upstream, faults: Faults, key_matches: Callable[[str], bool]
) -> Callable[[], None]:
    """Add the routes; returns what forgets every batch (for `POST /_sim/reset`)."""
    state = AnthropicBatchState(upstream, faults, key_matches)
    _add_create_route(app, state)
    add_list_route(app, state)
    _add_batch_routes(app, state)
    return state.forget_all


def _add_create_route(app: FastAPI, state: AnthropicBatchState) -> None:
    upstream, faults = state.upstream, state.faults

    @app.post("/v1/messages/batches")
    async def create_batch(request: Request) -> Any:
        upstream.count_request("create")
        if (refusal := state.denied(request)) is not None:
            return refusal
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if (problem := _batch_problem(request, raw, body)) is not None:
            return anthropic_error(400, "invalid_request_error", problem)
        decision = faults.decide(Route.CREATE)
        decision = through_gateway(
            request, faults, decision, lambda: _batch_again(state, body["requests"])
        )
        if (early := await before_create(decision)) is not None:
            return early
        batch = _new_batch(state, body["requests"])
        if decision is not None:
            # A charge per request that runs (one a task fault stops is never charged).
            made = [asked.task.task_id for asked in batch.requests if asked.fate == "succeeded"]
            faults.note(decision, made=made, batch_id=batch.id)
            return await transport_fault(decision, status_answer)  # made, the answer lost
        return batch_body(state, batch, root_of(request))


def _add_batch_routes(app: FastAPI, state: AnthropicBatchState) -> None:
    """The routes of one batch: its poll, its results download and its cancel."""
    upstream, faults, batches = state.upstream, state.faults, state.batches

    @app.get("/v1/messages/batches/{batch_id}")
    async def get_batch(batch_id: str, request: Request) -> Any:
        upstream.count_request("poll", batch_id)
        decision = faults.decide(Route.POLL, batch_id)
        if (early := await answered_early(decision, status_answer, refused)) is not None:
            return early
        if decision is not None and decision.fault == "forget":
            batches.pop(batch_id, None)
        batch = state.found(request, batch_id)
        true_answer = (
            batch if isinstance(batch, Response) else batch_body(state, batch, root_of(request))
        )
        return spoiled_answer(faults, decision, true_answer, status_field="processing_status")

    @app.get("/v1/messages/batches/{batch_id}/results")
    async def results(batch_id: str, request: Request) -> Any:
        decision = faults.decide(Route.RESULTS, batch_id)
        if (early := await answered_early(decision, status_answer)) is not None:
            return early
        true_answer = _results_file(state, request, batch_id)
        return spoiled_file(faults, decision, true_answer, "application/binary")

    @app.post("/v1/messages/batches/{batch_id}/cancel")
    async def cancel(batch_id: str, request: Request) -> Any:
        batch = state.found(request, batch_id)
        if isinstance(batch, Response):
            return batch
        if not batch.ended(time.monotonic()):
            batch.cancel_at = time.monotonic()
        return batch_body(state, batch, root_of(request))
