"""The simulator's HTTP face: an async task API like the paid services speak.

POST /v1/tasks            {model, prompt, posts: [{id, text}]} + Idempotency-Key -> 202
GET  /v1/tasks/{task_id}  status, output, usage; `?wait=S` holds the answer up to S seconds
GET  /_sim/charges        every charged task: the ground truth of what was paid
GET  /_sim/stats          requests by route, tasks in flight now and at most
"""

from __future__ import annotations

import asyncio
import hmac
import time
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from postledger.sim.upstream import IdempotencyConflict, SimTask, TaskState, Upstream

MAX_WAIT_SECONDS = 60.0


class PostIn(BaseModel):
    id: str = Field(min_length=1)
    text: str


class CreateTask(BaseModel):
    model: str = Field(min_length=1)
    prompt: str
    posts: list[PostIn] = Field(min_length=1)


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status)


def _task_body(task: SimTask, now: float) -> dict[str, Any]:
    state = task.state(now)
    done = state in (TaskState.SUCCEEDED, TaskState.FAILED)
    return {
        "task_id": task.task_id,
        "status": state.value,
        "output": task.output if state is TaskState.SUCCEEDED else None,
        "error": task.error if state is TaskState.FAILED else None,
        "usage": (
            {"input_tokens": task.input_tokens, "output_tokens": task.output_tokens}
            if done
            else None
        ),
    }


def create_app(
    upstream: Upstream, *, api_key: str | None = None, create_delay: float = 0.0
) -> FastAPI:
    """`create_delay` holds each create's answer after the task was made (and charged): the
    window in which a client has paid but does not know the task id yet (R6)."""
    app = FastAPI(title="postledger upstream simulator", docs_url=None, redoc_url=None)
    app.state.upstream = upstream

    def authorized(request: Request) -> bool:
        if api_key is None:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given, f"Bearer {api_key}")

    @app.post("/v1/tasks", status_code=202)
    async def create_task(
        body: CreateTask,
        request: Request,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> Any:
        upstream.count_request("create")
        if not authorized(request):
            return _error(401, "invalid_api_key", "Incorrect API key provided.")
        try:
            task, _charged = upstream.create(
                model=body.model,
                prompt=body.prompt,
                posts=[(p.id, p.text) for p in body.posts],
                idempotency_key=idempotency_key,
                now=time.monotonic(),
            )
        except IdempotencyConflict:
            return _error(
                422,
                "idempotency_conflict",
                "This Idempotency-Key was already used with a different request.",
            )
        if create_delay > 0:
            await asyncio.sleep(create_delay)
        return JSONResponse({"task_id": task.task_id, "status": "queued"}, status_code=202)

    @app.get("/v1/tasks/{task_id}")
    async def get_task(
        task_id: str,
        request: Request,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0.0,
    ) -> Any:
        upstream.count_request("poll")
        if not authorized(request):
            return _error(401, "invalid_api_key", "Incorrect API key provided.")
        task = upstream.get(task_id)
        if task is None:
            return _error(404, "not_found", f"No task {task_id}.")
        remaining = task.done_at - time.monotonic()
        if wait > 0 and remaining > 0:
            await asyncio.sleep(min(wait, remaining))
        return _task_body(task, time.monotonic())

    @app.get("/_sim/charges")
    async def charges() -> Any:
        with upstream.lock:
            return {"charges": [c.__dict__ for c in upstream.charges]}

    @app.get("/_sim/stats")
    async def stats() -> Any:
        return upstream.stats(time.monotonic())

    return app
