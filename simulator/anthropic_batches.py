"""The simulator's Anthropic Message Batches API, over the same tasks, fault injection and charge
log as its other faces.

POST /v1/messages/batches                 {"requests": [{"custom_id", "params"}]}: a batch
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
GET /v1/messages/batches/{id}, its `results` GET /v1/messages/batches/{id}/results (their read
faults, `poll:foreign_results_url` among them: `simulator.read_faults`).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI, Request, Response

from simulator.anthropic_api import (
    anthropic_error,
    before_create,
    forced_tool,
    message,
    problem_of,
    refused,
    status_answer,
    system_text,
)
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


@dataclass
class _Request:
    custom_id: str
    task: SimTask
    tool: str | None
    fate: str = "succeeded"  # or errored, expired, canceled


@dataclass
class _Batch:
    id: str
    requests: list[_Request]
    created_at: datetime
    cancel_at: float | None = None  # monotonic, when a cancel was asked
    results: list[dict[str, Any]] = field(default_factory=list)

    def ended(self, now: float) -> bool:
        return self.cancel_at is not None or all(now >= r.task.done_at for r in self.requests)


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


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


def add_anthropic_batch_routes(
    app: FastAPI, upstream: Upstream, faults: Faults, key_matches: Callable[[str], bool]
) -> Callable[[], None]:
    """Add the routes; returns what forgets every batch (for `POST /_sim/reset`)."""
    batches: dict[str, _Batch] = {}

    def denied(request: Request) -> Response | None:
        given = request.headers.get("x-api-key") or request.headers.get(
            "authorization", ""
        ).removeprefix("Bearer ")
        if key_matches(given):
            return None
        return anthropic_error(401, "authentication_error", "invalid x-api-key")

    def run(batch_id: str, custom_id: str, params: dict[str, Any], faulted: bool) -> _Request:
        """One request of a batch, run; `faulted=False`: it meets no task or output fault."""
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
            return _Request(custom_id, unbilled, tool, _FATE[task_fault.fault])
        task, _ = upstream.create(
            model=model,
            prompt=prompt,
            posts=posts,
            idempotency_key=custom_id,  # written in the charge log only: no keys here
            now=time.monotonic(),
            on_new=spoiled_by(faults, batch_id=batch_id, custom_id=custom_id) if faulted else None,
            honour_key=False,
        )
        return _Request(custom_id, task, tool)

    def new_batch(requests: list[dict[str, Any]], *, faulted: bool = True) -> _Batch:
        batch_id = f"msgbatch_{uuid.uuid4().hex[:24]}"
        batch = _Batch(
            id=batch_id,
            requests=[
                run(batch_id, item["custom_id"], item["params"], faulted) for item in requests
            ],
            created_at=datetime.now(UTC),
        )
        batches[batch.id] = batch
        return batch

    def batch_again(requests: list[dict[str, Any]]) -> Made:
        """A gateway's extra attempt: another Message Batch, each of its requests charged."""
        batch = new_batch(requests, faulted=False)
        return Made([request.task.task_id for request in batch.requests], batch.id)

    def body_of(batch: _Batch, root: str) -> dict[str, Any]:
        now = time.monotonic()
        ended = batch.ended(now)
        if ended and not batch.results:
            batch.results = [_result(r, batch.cancel_at) for r in batch.requests]
            for asked, result in zip(batch.requests, batch.results, strict=True):
                if asked.fate == "succeeded" and result["result"]["type"] == "canceled":
                    upstream.bill_only(asked.task.task_id, [])  # it never ran to its end
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        for result in batch.results:
            counts[result["result"]["type"]] += 1
        counts["processing"] = 0 if ended else len(batch.requests)
        status = "ended" if ended else "in_progress"
        body: dict[str, Any] = {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "created_at": _iso(batch.created_at),
            "expires_at": _iso(batch.created_at + timedelta(hours=24)),
            "ended_at": _iso(datetime.now(UTC)) if ended else None,
            "cancel_initiated_at": None,
            "archived_at": None,
            "results_url": None,
        }
        if batch.cancel_at is not None:
            body["cancel_initiated_at"] = _iso(datetime.now(UTC))
        if ended:
            body["results_url"] = f"{root}/v1/messages/batches/{batch.id}/results"
        return body

    @app.post("/v1/messages/batches")
    async def create_batch(request: Request) -> Any:
        upstream.count_request("create")
        if (refusal := denied(request)) is not None:
            return refusal
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if (problem := _batch_problem(request, raw, body)) is not None:
            return anthropic_error(400, "invalid_request_error", problem)
        decision = faults.decide(Route.CREATE)
        decision = through_gateway(request, faults, decision, lambda: batch_again(body["requests"]))
        if (early := await before_create(decision)) is not None:
            return early
        batch = new_batch(body["requests"])
        if decision is not None:
            # A charge per request that runs (one a task fault stops is never charged).
            made = [asked.task.task_id for asked in batch.requests if asked.fate == "succeeded"]
            faults.note(decision, made=made, batch_id=batch.id)
            return await transport_fault(decision, status_answer)  # made, the answer lost
        return body_of(batch, _root(request))

    def found(request: Request, batch_id: str) -> _Batch | Response:
        if (refusal := denied(request)) is not None:
            return refusal
        batch = batches.get(batch_id)
        if batch is None:
            return anthropic_error(404, "not_found_error", f"No batch with id {batch_id!r}")
        return batch

    @app.get("/v1/messages/batches/{batch_id}")
    async def get_batch(batch_id: str, request: Request) -> Any:
        upstream.count_request("poll", batch_id)
        decision = faults.decide(Route.POLL, batch_id)
        if (early := await answered_early(decision, status_answer, refused)) is not None:
            return early
        if decision is not None and decision.fault == "forget":
            batches.pop(batch_id, None)
        batch = found(request, batch_id)
        true_answer = batch if isinstance(batch, Response) else body_of(batch, _root(request))
        return spoiled_answer(faults, decision, true_answer, status_field="processing_status")

    @app.get("/v1/messages/batches/{batch_id}/results")
    async def results(batch_id: str, request: Request) -> Any:
        decision = faults.decide(Route.RESULTS, batch_id)
        if (early := await answered_early(decision, status_answer)) is not None:
            return early
        return spoiled_file(faults, decision, results_file(request, batch_id), "application/binary")

    def results_file(request: Request, batch_id: str) -> Response | bytes:
        """The true answer of a results download: its JSONL bytes, or the error."""
        batch = found(request, batch_id)
        if isinstance(batch, Response):
            return batch
        if not batch.ended(time.monotonic()):
            return anthropic_error(
                400, "invalid_request_error", f"Message Batch {batch_id} has not ended yet"
            )
        body_of(batch, _root(request))  # writes the results once
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in batch.results).encode()

    @app.post("/v1/messages/batches/{batch_id}/cancel")
    async def cancel(batch_id: str, request: Request) -> Any:
        batch = found(request, batch_id)
        if isinstance(batch, Response):
            return batch
        if not batch.ended(time.monotonic()):
            batch.cancel_at = time.monotonic()
        return body_of(batch, _root(request))

    return batches.clear


def _root(request: Request) -> str:
    """The root URL the client reached the simulator at (its Host)."""
    return str(request.base_url).rstrip("/")


def _result(request: _Request, cancel_at: float | None) -> dict[str, Any]:
    """One line of the results file."""
    task, fate = request.task, request.fate
    if fate == "succeeded" and cancel_at is not None and cancel_at < task.done_at:
        fate = "canceled"  # it had not finished when the cancel came: not billed
    if fate == "succeeded":
        answer = message(task.model, task.output, request.tool, task.input_tokens)
        result: dict[str, Any] = {"type": "succeeded", "message": answer}
    elif fate == "errored":
        error = {"type": "api_error", "message": "Internal server error"}
        result = {"type": "errored", "error": {"type": "error", "error": error}}
    else:
        result = {"type": fate}
    return {"custom_id": request.custom_id, "result": result}
