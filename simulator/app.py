"""The simulator's HTTP face: an async task API like the paid services speak.

POST /v1/tasks            {model, prompt, posts: [{id, text}]} + Idempotency-Key -> 202
GET  /v1/tasks/{task_id}  status, output, usage; `?wait=S` holds the answer up to S seconds
GET  /_sim/charges        every charged task: the ground truth of what was paid
GET  /_sim/stats          requests by route, tasks in flight now and at most
GET/POST /_sim/faults     the fault plan in force (see `simulator.faults`)
POST /_sim/tasks/{id}/forget   lose one task (its charge stays), as expiring upstreams do
POST /_sim/hold           {held}: no task ends while held; on release each ends one latency later
POST /_sim/reset          {latency, seed, honour_keys, faults}: forget every task, charge, count
                          and fault, as if just started so (tests reuse one process)

The OpenAI protocols, with the same faults and the same charge log: see
`simulator.openai_api` (/v1/chat/completions, /v1/files, /v1/batches); Anthropic's Messages
API: `simulator.anthropic_api` (/v1/messages); its Message Batches API:
`simulator.anthropic_batches` (/v1/messages/batches).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from simulator.anthropic_api import add_anthropic_routes
from simulator.anthropic_batches import add_anthropic_batch_routes
from simulator.faults import CREATE_AFTER, CREATE_REFUSED, FaultPlan, Faults, Route, load_plan
from simulator.gateway import GatewayHeader, Made, through_gateway
from simulator.openai_api import add_openai_routes
from simulator.outputs import spoiled_by
from simulator.read_faults import answered_early, spoiled_answer
from simulator.responses import error as _error
from simulator.responses import refusal as _refusal
from simulator.responses import transport_fault as _transport_fault
from simulator.upstream import IdempotencyConflict, SimTask, TaskState, Upstream

MAX_WAIT_SECONDS = 60.0


class PostIn(BaseModel):
    id: str = Field(min_length=1)
    text: str


class HoldTo(BaseModel):
    held: bool


class ResetTo(BaseModel):
    """The options of `postledger sim serve` a reset may change."""

    latency: float = Field(default=1.0, ge=0)
    seed: int = 0
    honour_keys: bool = True
    faults: str | None = None  # the compact form, as --faults takes it


class CreateTask(BaseModel):
    model: str = Field(min_length=1)
    prompt: str
    posts: list[PostIn] = Field(min_length=1)


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
    upstream: Upstream,
    *,
    api_key: str | None = None,
    create_delay: float = 0.0,
    faults: Faults | None = None,
) -> FastAPI:
    """`create_delay` holds each create's answer after the task was made (and charged): the
    window in which a client has paid but does not know the task id yet (R6)."""
    app = FastAPI(title="postledger upstream simulator", docs_url=None, redoc_url=None)
    app.add_middleware(GatewayHeader)  # the gateway faults' x-litellm-attempted-retries
    faults = faults or Faults()
    app.state.upstream = upstream
    app.state.faults = faults

    def authorized(request: Request) -> bool:
        if api_key is None:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given, f"Bearer {api_key}")

    def make_task(
        body: CreateTask, idempotency_key: str | None, *, faulted: bool = True
    ) -> tuple[SimTask, bool]:
        """(task, charged); `faulted=False`: it meets no task or output fault."""

        def spoil(task: SimTask) -> None:
            if faults.decide(Route.TASK, task.task_id) is not None:
                task.error = "The model failed to process this request (simulated)."
            spoiled_by(faults)(task)

        return upstream.create(
            model=body.model,
            prompt=body.prompt,
            posts=[(p.id, p.text) for p in body.posts],
            idempotency_key=idempotency_key,
            now=time.monotonic(),
            on_new=spoil if faulted else None,
        )

    def make_again(body: CreateTask, idempotency_key: str | None) -> Made:
        """A gateway's extra attempt. Under a key the upstream honours, the task it makes is
        the key's: the one the request's answer (or a later create under the key) names, so
        it meets the faults the request's own task would, and its charge is not the
        gateway's. A key used with another request makes nothing (the answer is the 422)."""
        keyed = idempotency_key is not None and upstream.honour_keys
        try:
            task, charged = make_task(body, idempotency_key, faulted=keyed)
        except IdempotencyConflict:
            return Made()
        return Made([task.task_id] if charged and not keyed else [])

    @app.post("/v1/tasks", status_code=202)
    async def create_task(
        body: CreateTask,
        request: Request,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> Any:
        upstream.count_request("create")
        if not authorized(request):
            return _error(401, "invalid_api_key", "Incorrect API key provided.")
        decision = faults.decide(Route.CREATE)
        if decision is not None and decision.fault in CREATE_REFUSED:
            return _refusal(decision)
        decision = through_gateway(
            request, faults, decision, lambda: make_again(body, idempotency_key)
        )
        if decision is not None and decision.fault not in CREATE_AFTER:
            return await _transport_fault(decision)  # nothing was made
        try:
            task, charged = make_task(body, idempotency_key)
        except IdempotencyConflict:
            if decision is not None:  # nothing made: the 422 is the true answer
                faults.note(decision, made=[], applied=False)
            return _error(
                422,
                "idempotency_conflict",
                "This Idempotency-Key was already used with a different request.",
            )
        if decision is not None:
            # Made and charged (a known, honoured key's task: made and charged before), the
            # answer lost.
            faults.note(decision, made=[task.task_id] if charged else [])
            return await _transport_fault(decision)
        if create_delay > 0:
            await asyncio.sleep(create_delay)
        return JSONResponse({"task_id": task.task_id, "status": "queued"}, status_code=202)

    @app.get("/v1/tasks/{task_id}")
    async def get_task(
        task_id: str,
        request: Request,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0.0,
    ) -> Any:
        upstream.count_request("poll", task_id)
        if not authorized(request):
            return _error(401, "invalid_api_key", "Incorrect API key provided.")
        decision = faults.decide(Route.POLL, task_id)
        if (early := await answered_early(decision)) is not None:
            return early
        if decision is not None and decision.fault == "forget":
            upstream.forget(task_id)
        task = upstream.get(task_id)
        if task is None:
            return spoiled_answer(faults, decision, _error(404, "not_found", f"No task {task_id}."))
        remaining = task.done_at - time.monotonic()
        if wait > 0 and remaining > 0:
            await asyncio.sleep(min(wait, remaining))
        return spoiled_answer(faults, decision, _task_body(task, time.monotonic()))

    forget_openai = add_openai_routes(app, upstream, faults, authorized)

    def key_matches(given: str) -> bool:
        return api_key is None or hmac.compare_digest(given, api_key)

    add_anthropic_routes(app, upstream, faults, key_matches)
    forget_anthropic_batches = add_anthropic_batch_routes(app, upstream, faults, key_matches)

    @app.get("/_sim/charges")
    async def charges() -> Any:
        with upstream.lock:
            return {"charges": [c.__dict__ for c in upstream.charges]}

    @app.get("/_sim/stats")
    async def stats() -> Any:
        return {**upstream.stats(time.monotonic()), "faults_fired": len(faults.fired)}

    @app.get("/_sim/faults")
    async def get_faults() -> Any:
        return {"plan": faults.plan.model_dump(mode="json"), "fired": faults.fired}

    @app.post("/_sim/faults")
    async def set_faults(plan: FaultPlan) -> Any:
        faults.replace(plan)
        return {"plan": plan.model_dump(mode="json")}

    @app.post("/_sim/reset")
    async def reset(options: ResetTo) -> Any:
        """Forget every task, file, batch, charge, count and fault, and go on as if just
        started with these options: tests reuse one simulator process for many tests."""
        try:
            plan = load_plan(options.faults, None, options.seed)
        except (ValidationError, ValueError) as exc:
            return _error(422, "invalid_request_error", f"bad fault plan: {exc}")
        upstream.reset(latency=options.latency, seed=options.seed, honour_keys=options.honour_keys)
        faults.replace(plan)
        forget_openai()
        forget_anthropic_batches()
        return {"plan": plan.model_dump(mode="json")}

    @app.post("/_sim/hold")
    async def hold(to: HoldTo) -> Any:
        """Keep every task in flight until released: a test that needs work in flight at a
        given moment holds it there rather than hoping the latency outlasts its setup."""
        upstream.hold(to.held, time.monotonic())
        return {"held": to.held}

    @app.post("/_sim/tasks/{task_id}/forget")
    async def forget_task(task_id: str) -> Any:
        """Lose one task, as an upstream that expires tasks does (its charge stays)."""
        upstream.forget(task_id)
        return {"forgotten": task_id}

    return app
