"""The simulator's own face: an async task API like the paid services speak.

POST /v1/tasks            {model, prompt, schema?, posts: [{id, text}]} + Idempotency-Key -> 202
GET  /v1/tasks/{task_id}  status, output, usage; `?wait=S` holds the answer up to S seconds

`schema` is the JSON Schema of one post's answer (`simulator.analyses`); without it (older
clients), the default analysis. Fault routes (`simulator.faults`): `create` is POST /v1/tasks,
`poll` GET /v1/tasks/{id}.

Its prompt is cached as OpenAI caches a system prompt (`simulator.caching`), and its usage
says so in the simulator's own words: `{"input_tokens": <input not read from the cache>,
"cached_input_tokens": <read from it>, "output_tokens"}`, which the client passes on to the
ledger as it is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from simulator.caching import Prefix
from simulator.faults import CREATE_AFTER, CREATE_REFUSED, Faults, Route
from simulator.gateway import Made, through_gateway
from simulator.outputs import spoiled_by
from simulator.read_faults import answered_early, spoiled_answer
from simulator.responses import error, refusal, transport_fault
from simulator.task import SimTask, TaskState
from simulator.upstream import IdempotencyConflict, Upstream

MAX_WAIT_SECONDS = 60.0


class PostIn(BaseModel):
    id: str = Field(min_length=1)
    text: str


class CreateTask(BaseModel):
    model: str = Field(min_length=1)
    prompt: str
    posts: list[PostIn] = Field(min_length=1)
    # Any JSON at all: one the simulator cannot read is asked the default analysis, as a
    # server that ignores it would.
    item_schema: Any = Field(default=None, alias="schema")


@dataclass
class TaskApi:
    """What the task routes charge, fault and check through. `create_delay` holds each
    create's answer after the task was made (and charged): the window in which a client has
    paid but does not know the task id yet (R6)."""

    upstream: Upstream
    faults: Faults
    authorized: Callable[[Request], bool]
    create_delay: float = 0.0

    def make_task(
        self, body: CreateTask, idempotency_key: str | None, *, faulted: bool = True
    ) -> tuple[SimTask, bool]:
        """(task, charged); `faulted=False`: it meets no task or output fault."""
        faults = self.faults

        def spoil(task: SimTask) -> None:
            if faults.decide(Route.TASK, task.task_id) is not None:
                task.error = "The model failed to process this request (simulated)."
            spoiled_by(faults)(task)

        return self.upstream.create(
            model=body.model,
            prompt=body.prompt,
            posts=[(p.id, p.text) for p in body.posts],
            idempotency_key=idempotency_key,
            now=time.monotonic(),
            on_new=spoil if faulted else None,
            schema=body.item_schema if isinstance(body.item_schema, dict) else None,
            cache=Prefix(body.prompt),
        )

    def make_again(self, body: CreateTask, idempotency_key: str | None) -> Made:
        """A gateway's extra attempt. Under a key the upstream honours, the task it makes is
        the key's: the one the request's answer (or a later create under the key) names, so
        it meets the faults the request's own task would, and its charge is not the
        gateway's. A key used with another request makes nothing (the answer is the 422)."""
        keyed = idempotency_key is not None and self.upstream.honour_keys
        try:
            task, charged = self.make_task(body, idempotency_key, faulted=keyed)
        except IdempotencyConflict:
            return Made()
        return Made([task.task_id] if charged and not keyed else [])


def _task_body(task: SimTask, now: float) -> dict[str, Any]:
    state = task.state(now)
    done = state in (TaskState.SUCCEEDED, TaskState.FAILED)
    usage = task.usage()
    return {
        "task_id": task.task_id,
        "status": state.value,
        "output": task.output if state is TaskState.SUCCEEDED else None,
        "error": task.error if state is TaskState.FAILED else None,
        "usage": (
            {
                "input_tokens": usage.input_tokens,
                "cached_input_tokens": usage.cached_input_tokens,
                "output_tokens": usage.output_tokens,
            }
            if done
            else None
        ),
    }


def add_task_routes(app: FastAPI, api: TaskApi) -> None:
    _add_create_route(app, api)
    _add_poll_route(app, api)


def _add_create_route(app: FastAPI, api: TaskApi) -> None:
    upstream, faults = api.upstream, api.faults

    @app.post("/v1/tasks", status_code=202)
    async def create_task(
        body: CreateTask,
        request: Request,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> Any:
        upstream.count_request("create")
        if not api.authorized(request):
            return error(401, "invalid_api_key", "Incorrect API key provided.")
        decision = faults.decide(Route.CREATE)
        if decision is not None and decision.fault in CREATE_REFUSED:
            return refusal(decision)
        decision = through_gateway(
            request, faults, decision, lambda: api.make_again(body, idempotency_key)
        )
        if decision is not None and decision.fault not in CREATE_AFTER:
            return await transport_fault(decision)  # nothing was made
        try:
            task, charged = api.make_task(body, idempotency_key)
        except IdempotencyConflict:
            if decision is not None:  # nothing made: the 422 is the true answer
                faults.note(decision, made=[], applied=False)
            return error(
                422,
                "idempotency_conflict",
                "This Idempotency-Key was already used with a different request.",
            )
        if decision is not None:
            # Made and charged (a known, honoured key's task: made and charged before), the
            # answer lost.
            faults.note(decision, made=[task.task_id] if charged else [])
            return await transport_fault(decision)
        if api.create_delay > 0:
            await asyncio.sleep(api.create_delay)
        return JSONResponse({"task_id": task.task_id, "status": "queued"}, status_code=202)


def _add_poll_route(app: FastAPI, api: TaskApi) -> None:
    upstream, faults = api.upstream, api.faults

    @app.get("/v1/tasks/{task_id}")
    async def get_task(
        task_id: str,
        request: Request,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0.0,
    ) -> Any:
        upstream.count_request("poll", task_id)
        if not api.authorized(request):
            return error(401, "invalid_api_key", "Incorrect API key provided.")
        decision = faults.decide(Route.POLL, task_id)
        if (early := await answered_early(decision)) is not None:
            return early
        if decision is not None and decision.fault == "forget":
            upstream.forget(task_id)
        task = upstream.get(task_id)
        if task is None:
            return spoiled_answer(faults, decision, error(404, "not_found", f"No task {task_id}."))
        remaining = task.done_at - time.monotonic()
        if wait > 0 and remaining > 0:
            await asyncio.sleep(min(wait, remaining))
        return spoiled_answer(faults, decision, _task_body(task, time.monotonic()))
