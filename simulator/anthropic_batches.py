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
request is run as one Messages API call would be, and meets the prompt cache as one would, in
the order they are run (`simulator.caching`). Requests that do not succeed are not billed, as
Anthropic bills only the ones that did (at half the Messages API's price: `simulator.billing`):
a `task:task_failed` fault makes a request `errored`, `task:expired` makes it `expired`,
`task:cancelled` `canceled`; a request a cancel stops before its end is `canceled` and its
charge (its cost with it) is taken back. Create faults are
the Messages API's; a `poll:forget` loses the batch (404 `not_found_error`). Its `poll` is
GET /v1/messages/batches/{id}, its `results` GET /v1/messages/batches/{id}/results, its
`list` GET /v1/messages/batches (their read faults, `poll:foreign_results_url` among them:
`simulator.read_faults`).

The batches its routes share are one `simulator.anthropic_batch_state.AnthropicBatchState`;
what a batch shows, its body and its results file, is `simulator.anthropic_batch_output`'s.
A create's body is read as it arrives (`simulator.anthropic_batch_body`), and what each
request answers is kept on disk, from the create on: memory holds a request at a time.
As Anthropic's does, a create answers once its body is read and checked (`in_progress`, every
request `processing`), and its requests are run after, a slice at a time between the other
routes' turns: a month's create is 100 000 requests, and running them first kept the answer
(and every other route) waiting past a client's read timeout. A create that meets a fault
after it is made runs them all first, to charge them before the answer is lost.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from fastapi import FastAPI, Request, Response

from simulator.analyses import messages_item_schema
from simulator.anthropic_api import (
    anthropic_error,
    before_create,
    forced_tool,
    message,
    refused,
    status_answer,
    system_text,
)
from simulator.anthropic_batch_body import CreateBody, read_create_body
from simulator.anthropic_batch_list import add_list_route
from simulator.anthropic_batch_output import answer_line, batch_body, root_of
from simulator.anthropic_batch_state import AnthropicBatchState, BatchRequest, MessageBatch
from simulator.billing import BATCH_DISCOUNT
from simulator.caching import anthropic_prefix
from simulator.faults import Faults, Route
from simulator.gateway import Made, through_gateway
from simulator.openai_chat import chat_input
from simulator.outputs import spoiled_by
from simulator.read_faults import answered_early, spoiled_answer, spoiled_file_at
from simulator.responses import transport_fault
from simulator.spool import Spool, discard
from simulator.task import SimTask
from simulator.upstream import Upstream

# What a task fault makes of a request: it does not succeed, and is not billed.
_FATE = {"task_failed": "errored", "expired": "expired", "cancelled": "canceled"}
# How many requests are run between two turns of the other routes (~0.1 s of work).
_SLICE = 250


class _Shared:
    """One copy of what a batch's requests carry alike (their system prompt, their schema,
    their model): 20 000 requests keep one, not 20 000."""

    def __init__(self) -> None:
        self._seen: dict[str, Any] = {}

    def one(self, value: Any) -> Any:
        key = value if isinstance(value, str) else json.dumps(value)
        return self._seen.setdefault(f"{type(value).__name__}:{key}", value)


def _run(
    state: AnthropicBatchState,
    batch: MessageBatch,
    item: dict[str, Any],
    faulted: bool,
    shared: _Shared,
    answers: TextIO,
) -> BatchRequest:
    """One request of a batch, run, its results line written to `answers` (if it runs);
    `faulted=False`: it meets no task or output fault. Its latency runs from the batch's
    create, as every request of a Message Batch is the provider's from then: however long the
    simulator takes to get to it, a batch of 60 s requests ends 60 s after its create."""
    batch_id, now = batch.id, batch.started
    upstream, faults = state.upstream, state.faults
    custom_id, params = item["custom_id"], item["params"]
    system = {"role": "system", "content": system_text(params.get("system"))}
    prompt, posts = chat_input([system, *params["messages"]])
    model, tool = shared.one(str(params["model"])), forced_tool(params)
    prompt = shared.one(prompt)
    # No task id: a request a task fault keeps from running is never charged.
    task_fault = (
        faults.decide(Route.TASK, batch_id=batch_id, custom_id=custom_id) if faulted else None
    )
    if task_fault is not None and task_fault.fault in _FATE:
        # It never runs: no task upstream, nothing billed.
        unbilled = SimTask(
            f"task_{uuid.uuid4().hex}",
            None,
            model,
            prompt,
            [],
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
        now=now,
        on_new=spoiled_by(faults, batch_id=batch_id, custom_id=custom_id) if faulted else None,
        honour_key=False,
        schema=shared.one(messages_item_schema(params)),
        cache=anthropic_prefix(params.get("system")),
        discount=BATCH_DISCOUNT,
    )
    answer = message(task.model, task.output, tool, task.usage())
    answers.write(answer_line(custom_id, answer) + "\n")
    task.posts, task.output = [], ""  # its answer is on disk
    return BatchRequest(custom_id, task, tool)


def _new_batch(state: AnthropicBatchState, body: CreateBody) -> MessageBatch:
    """A batch of the body's requests, none of them run yet (`_running`)."""
    batch = MessageBatch(
        id=f"msgbatch_{uuid.uuid4().hex[:24]}",
        requests=[],
        count=body.count,
        created_at=state.created_now(),
        started=time.monotonic(),
        answers=state.spool.fresh("answers"),
    )
    state.batches[batch.id] = batch
    return batch


def _running(
    state: AnthropicBatchState, batch: MessageBatch, body: CreateBody, *, faulted: bool
) -> Iterator[None]:
    """Run the batch's requests, in order, pausing after each slice of them (so that the
    routes answer meanwhile); the batch's `all_run` once every one has."""
    shared, answers = _Shared(), batch.answers
    assert answers is not None
    try:
        with answers.open("w", encoding="utf-8") as out:
            for item in body.requests():
                batch.requests.append(_run(state, batch, item, faulted, shared, out))
                if len(batch.requests) % _SLICE == 0:
                    yield
    except BaseException:
        discard(answers)
        raise
    batch.all_run = True


def _run_now(state: AnthropicBatchState, batch: MessageBatch, body: CreateBody) -> None:
    for _ in _running(state, batch, body, faulted=True):
        pass


async def _run_in_turns(state: AnthropicBatchState, batch: MessageBatch, body: CreateBody) -> None:
    """Run the requests of a batch whose create has answered, yielding to the other routes
    between slices; the body is discarded once all have run (or the work is cancelled)."""
    try:
        for _ in _running(state, batch, body, faulted=True):
            await asyncio.sleep(0)
    finally:
        body.discard()


def _said_if_failed(work: asyncio.Task[None]) -> None:
    """A batch whose requests could not all be run never ends: say why, at once, rather
    than when the task is collected."""
    if not work.cancelled() and (exc := work.exception()) is not None:
        traceback.print_exception(exc, file=sys.stderr)


def _batch_again(state: AnthropicBatchState, body: CreateBody) -> Made:
    """A gateway's extra attempt: another Message Batch, each of its requests charged."""
    batch = _new_batch(state, body)
    for _ in _running(state, batch, body, faulted=False):
        pass
    return Made([request.task.task_id for request in batch.requests], batch.id)


def _results_file(state: AnthropicBatchState, request: Request, batch_id: str) -> Response | Path:
    """The true answer of a results download: its JSONL file, or the error."""
    batch = state.found(request, batch_id)
    if isinstance(batch, Response):
        return batch
    if not batch.ended(time.monotonic()):
        return anthropic_error(
            400, "invalid_request_error", f"Message Batch {batch_id} has not ended yet"
        )
    batch_body(state, batch, root_of(request))  # writes the results once
    assert batch.results is not None
    return batch.results


def add_anthropic_batch_routes(
    app: FastAPI,
    upstream: Upstream,
    faults: Faults,
    key_matches: Callable[[str], bool],
    spool: Spool,
) -> Callable[[], None]:
    """Add the routes; returns what forgets every batch (for `POST /_sim/reset`). `spool`:
    where its batches' answers and results are kept."""
    state = AnthropicBatchState(upstream, faults, key_matches, spool)
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
        body = await read_create_body(request, state.spool)
        handed_over = False  # to the background work that runs the requests
        try:
            if (problem := body.problem()) is not None:
                return anthropic_error(400, "invalid_request_error", problem)
            decision = faults.decide(Route.CREATE)
            decision = through_gateway(request, faults, decision, lambda: _batch_again(state, body))
            if (early := await before_create(decision)) is not None:
                return early
            batch = _new_batch(state, body)
            if decision is None:
                # Answered now, run after: the body is the background work's from here on.
                work = asyncio.create_task(_run_in_turns(state, batch, body))
                state.running.add(work)
                work.add_done_callback(state.running.discard)
                work.add_done_callback(_said_if_failed)
                handed_over = True
                return batch_body(state, batch, root_of(request))
            _run_now(state, batch, body)
        finally:
            if not handed_over:
                body.discard()  # each batch made of it keeps its own answers
        # A charge per request that runs (one a task fault stops is never charged).
        made = [asked.task.task_id for asked in batch.requests if asked.fate == "succeeded"]
        faults.note(decision, made=made, batch_id=batch.id)
        return await transport_fault(decision, status_answer)  # made, the answer lost


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
        return spoiled_file_at(faults, decision, true_answer, "application/binary")

    @app.post("/v1/messages/batches/{batch_id}/cancel")
    async def cancel(batch_id: str, request: Request) -> Any:
        batch = state.found(request, batch_id)
        if isinstance(batch, Response):
            return batch
        if not batch.ended(time.monotonic()):
            batch.cancel_at = time.monotonic()
        return batch_body(state, batch, root_of(request))
