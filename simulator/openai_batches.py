"""The simulator's OpenAI Batch API, over the same tasks, fault injection and charge log as its
other faces.

POST /v1/batches              {input_file_id, endpoint, completion_window, metadata}: charged
GET  /v1/batches              the batches, newest first; `limit`, `after`
GET  /v1/batches/{id}         one batch; output and error files once it ended
POST /v1/batches/{id}/cancel  cancelling -> cancelled; the requests not yet run are undone

Fault routes (`simulator.faults`): `poll` is GET /v1/batches/{id}, `list` GET /v1/batches
(their read faults: `simulator.read_faults`).

A batch runs all its requests as one simulated task (one charge listing every post, under the
`postledger_key` of its metadata), which takes the simulator's latency; what it shows once it
ended is `simulator.openai_batch_output`'s. It is billed at half the chat completions' price
(`simulator.billing`): at its create, for now, as one request of its prompt and its running
posts, uncached; once it is finished, as its lines' answers report, line by line
(`simulator.openai_batch_finish`). It answers the analysis its first line asks
(`simulator.analyses`). A line whose strict schema OpenAI would refuse
(`simulator.openai_strict`) does not run: its 400 is in the error file, and it is not billed.

Its input file is read from disk a line at a time (`simulator.openai_batch_scan`), and what
its lines hold stays on disk while it runs (`simulator.openai_batch_lines`): in memory, a batch
keeps its custom_ids, and its charge the ids of the posts it bills.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Response

from simulator.billing import BATCH_DISCOUNT
from simulator.faults import CREATE_AFTER, CREATE_REFUSED, WHOLE_OUTPUT, Decision, Faults, Route
from simulator.gateway import Made, through_gateway
from simulator.openai_batch_lines import BatchLines, with_spoiled_item
from simulator.openai_batch_output import ENDPOINT, batch_body
from simulator.openai_batch_rules import create_problem
from simulator.openai_batch_scan import ScannedInput, read_lines, scan_input
from simulator.openai_state import (
    ENDED_STATES,
    OpenAIState,
    SimBatch,
    SimFile,
    denied,
    invalid,
    new_id,
)
from simulator.read_faults import answered_early, spoiled_answer
from simulator.responses import refusal, transport_fault
from simulator.task import SimTask


@dataclass
class _BatchInput:
    """A create request that passed the checks: its body, its input file and what its lines
    hold (any invalid line makes a batch that fails validation; each line whose schema
    OpenAI refuses is refused, by custom_id)."""

    body: dict[str, Any]
    source: SimFile
    scanned: ScannedInput


@dataclass
class _BatchFaults:
    """The task and output faults a new batch meets, drawn as its task is made (the upstream's
    `on_new`), so that they are drawn only for a task that is new."""

    faults: Faults
    batch_id: str
    scanned: ScannedInput
    lines: BatchLines
    fate: str = "completed"
    failed_request: str | None = None
    spoiled_request: tuple[str, str] | None = None

    def draw(self, task: SimTask) -> None:
        faults, running = self.faults, self.scanned.running
        task_fault = faults.decide(Route.TASK, task.task_id, batch_id=self.batch_id)
        if task_fault is not None:
            self.fate = "failed" if task_fault.fault == "task_failed" else task_fault.fault
        output_fault = faults.decide(Route.OUTPUT, task.task_id, batch_id=self.batch_id)
        if output_fault is not None and output_fault.fault == "request_error":
            self.failed_request = running[faults.pick(Route.OUTPUT, len(running))]
            faults.note(output_fault, custom_id=self.failed_request)
        elif output_fault is not None and output_fault.fault in WHOLE_OUTPUT:
            # The answer of one request (one line) goes wrong, not every line's.
            custom_id = running[faults.pick(Route.OUTPUT, len(running))]
            self.spoiled_request = (custom_id, output_fault.fault)
            faults.note(output_fault, custom_id=custom_id)
        elif output_fault is not None:  # one item of the whole output
            count, known = len(self.scanned.post_ids), self.scanned.known
            self.lines = with_spoiled_item(
                self.lines, faults, output_fault, count, known, task.schema
            )


def _batch_input(state: OpenAIState, body: Any) -> _BatchInput | Response:
    """The input of a create request, or why it is refused (nothing made)."""
    if not isinstance(body, dict):
        return invalid("the body must be a JSON object")
    if (problem := create_problem(body, (ENDPOINT,))) is not None:
        return invalid(problem)
    source = state.files.get(str(body.get("input_file_id")))
    if source is None or source.purpose != "batch":
        return invalid("input_file_id names no uploaded file of purpose batch")
    scanned = scan_input(source.path, ENDPOINT)
    if not scanned.custom_ids and not scanned.bad_lines:
        return invalid("the input file has no requests")
    return _BatchInput(body, source, scanned)


def _metadata(body: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (body.get("metadata") or {}).items()}


def _batch_task(
    state: OpenAIState,
    scanned: ScannedInput,
    key: str | None,
    on_new: Callable[[SimTask], None] | None,
    now: float,
) -> SimTask:
    """The one task that runs the lines not refused, made and charged; no line to run (every
    one refused): a task never billed, that ends after the latency."""
    if not scanned.running:
        return SimTask(
            new_id("task"), None, "", "", [], now, now + state.upstream.latency, "[]", 0, 0
        )
    return state.upstream.create_counted(
        model=scanned.model,
        prompt=scanned.prompt,
        post_ids=scanned.post_ids,
        input_tokens=scanned.input_tokens,
        output_tokens=scanned.output_tokens,
        idempotency_key=key,
        now=now,
        on_new=on_new,
        schema=scanned.schema,
        discount=BATCH_DISCOUNT,
    )


def _new_batch(state: OpenAIState, given: _BatchInput, *, faulted: bool = True) -> SimBatch:
    """A batch of the valid lines, made and charged for those not refused; `faulted=False`:
    it meets no task or output fault."""
    scanned, metadata = given.scanned, _metadata(given.body)
    # Its latency runs from before its posts are answered, as when the model wrote its whole
    # output in the task's own time.
    now = time.monotonic()
    drawn = _BatchFaults(state.faults, new_id("batch"), scanned, read_lines(scanned, state.spool))
    on_new = drawn.draw if faulted else None
    task = _batch_task(state, scanned, metadata.get("postledger_key"), on_new, now)
    batch = SimBatch(
        id=drawn.batch_id,
        task=task,
        input_file_id=given.source.id,
        completion_window=str(given.body["completion_window"]),
        metadata=metadata,
        created_at=int(time.time()),
        fate=drawn.fate,
        # Only the custom_ids: what each line holds is on disk (`lines`).
        requests=[(custom_id, ()) for custom_id in scanned.custom_ids],
        json_mode=scanned.json_mode,
        failed_request=drawn.failed_request,
        spoiled_request=drawn.spoiled_request,
        refused=scanned.refused,
        lines=drawn.lines,
    )
    return state.add_batch(batch)


def _charged(batch: SimBatch) -> list[str]:
    """The charge a batch made: none when every line was refused."""
    return [batch.task.task_id] if len(batch.requests) > len(batch.refused) else []


def _rejected_batch(state: OpenAIState, given: _BatchInput) -> SimBatch:
    """A batch that failed validation: it never runs, and is never billed."""
    now = time.monotonic()
    unbilled = SimTask(new_id("task"), None, "", "", [], now, now, "", 0, 0, "invalid input")
    batch = SimBatch(
        id=new_id("batch"),
        task=unbilled,
        input_file_id=given.source.id,
        completion_window=str(given.body["completion_window"]),
        metadata=_metadata(given.body),
        created_at=int(time.time()),
        fate="failed",
        line_errors=given.scanned.bad_lines,
    )
    return state.add_batch(batch)


def _batch_again(state: OpenAIState, given: _BatchInput) -> Made:
    """A gateway's extra attempt: another batch of the same file and metadata, charged for
    all its lines (or, failing validation, unbilled)."""
    if given.scanned.bad_lines:
        return Made(batch=_rejected_batch(state, given).id)
    batch = _new_batch(state, given, faulted=False)
    return Made(_charged(batch), batch.id)


def _listing(state: OpenAIState, limit: int, after: str | None) -> dict[str, Any]:
    """One page of the batches, newest first, starting after the batch `after`."""
    with state.lock:
        newest_first = list(reversed(state.batches.values()))
    if after is not None:
        ids = [b.id for b in newest_first]
        newest_first = newest_first[ids.index(after) + 1 :] if after in ids else []
    page = newest_first[:limit]
    data = [batch_body(state, b) for b in page]
    ends = {"first_id": data[0]["id"], "last_id": data[-1]["id"]} if data else {}
    return {"object": "list", "data": data, **ends, "has_more": len(newest_first) > limit}


def add_batch_routes(app: FastAPI, state: OpenAIState) -> None:
    upstream, faults, batches = state.upstream, state.faults, state.batches

    @app.post("/v1/batches")
    async def create_batch(request: Request) -> Any:
        upstream.count_request("create")
        if not state.authorized(request):
            return denied()
        given = _batch_input(state, await request.json())
        if isinstance(given, Response):
            return given
        decision = faults.decide(Route.CREATE)
        if decision is not None and decision.fault in CREATE_REFUSED:
            return refusal(decision, openai=True)
        decision = through_gateway(request, faults, decision, lambda: _batch_again(state, given))
        if decision is not None and decision.fault not in CREATE_AFTER:
            return await transport_fault(decision)  # nothing was made
        if given.scanned.bad_lines:  # it fails validation: nothing runs, nothing is billed
            rejected = _rejected_batch(state, given)
            if decision is not None:  # answered all the same: the fault changes nothing
                faults.note(decision, made=[], batch_id=rejected.id, applied=False)
            return batch_body(state, rejected)
        batch = _new_batch(state, given)
        if decision is not None:
            faults.note(decision, made=_charged(batch), batch_id=batch.id)
            return await transport_fault(decision)  # made and charged, the answer is lost
        return batch_body(state, batch)

    @app.get("/v1/batches")
    async def list_batches(
        request: Request,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        after: str | None = None,
    ) -> Any:
        upstream.count_request("list")
        if not state.authorized(request):
            return denied()
        decision = faults.decide(Route.LIST, after)
        if (early := await answered_early(decision)) is not None:
            return early
        return spoiled_answer(faults, decision, _listing(state, limit, after))

    @app.get("/v1/batches/{batch_id}")
    async def get_batch(batch_id: str, request: Request) -> Any:
        upstream.count_request("poll", batch_id)
        if not state.authorized(request):
            return denied()
        decision = faults.decide(Route.POLL, batch_id)
        if (early := await answered_early(decision, refuse=openai_refusal)) is not None:
            return early
        if decision is not None and decision.fault == "forget":
            with state.lock:
                batches.pop(batch_id, None)
        batch = batches.get(batch_id)
        if batch is None:
            return spoiled_answer(
                faults, decision, invalid(f"No batch found with id '{batch_id}'.", 404)
            )
        return spoiled_answer(faults, decision, batch_body(state, batch))

    @app.post("/v1/batches/{batch_id}/cancel")
    async def cancel_batch(batch_id: str, request: Request) -> Any:
        if not state.authorized(request):
            return denied()
        batch = batches.get(batch_id)
        if batch is None:
            return invalid(f"No batch found with id '{batch_id}'.", 404)
        if batch.task.state(time.monotonic()) not in ENDED_STATES and batch.cancel_at is None:
            batch.cancel_at = time.monotonic()
            batch.fate = "cancelled"
        return batch_body(state, batch)


def openai_refusal(decision: Decision) -> Response:
    return refusal(decision, openai=True)
