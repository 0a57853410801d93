"""What a Message Batch shows: its body (processing_status, request_counts, results_url) and,
once it ended, its results file, one JSON line per request.

Its results are written once, the first time it is seen ended, to a file (a line at a time,
from the answers its requests were made with): a request a cancel stopped before its end is
`canceled` there, and its charge is taken back then.

Its times are RFC 3339 UTC with microseconds (`2024-08-20T18:37:24.100435Z`), as Anthropic
writes them, and the same at every read: `ended_at` is when its last request ended (or the
cancel came), `cancel_initiated_at` when the cancel came, both on the clock of `created_at`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from fastapi import Request

from simulator.anthropic_batch_state import AnthropicBatchState, BatchRequest, MessageBatch
from simulator.spool import discard, lines_of


def batch_body(state: AnthropicBatchState, batch: MessageBatch, root: str) -> dict[str, Any]:
    """The batch as the API shows it; `root`: the URL its `results_url` starts with."""
    ended = batch.ended(time.monotonic())
    if ended and batch.counts is None:
        _write_results(state, batch)
    counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    for kind, count in (batch.counts or {}).items():
        counts[kind] += count
    counts["processing"] = 0 if ended else batch.count
    status = "ended" if ended else "in_progress"
    body: dict[str, Any] = {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": counts,
        "created_at": _iso(batch.created_at),
        "expires_at": _iso(batch.created_at + timedelta(hours=24)),
        "ended_at": _iso(batch.wall(_end(batch))) if ended else None,
        "cancel_initiated_at": None,
        "archived_at": None,
        "results_url": None,
    }
    if batch.cancel_at is not None:
        body["cancel_initiated_at"] = _iso(batch.wall(batch.cancel_at))
    if ended:
        body["results_url"] = f"{root}/v1/messages/batches/{batch.id}/results"
    return body


def root_of(request: Request) -> str:
    """The root URL the client reached the simulator at (its Host)."""
    return str(request.base_url).rstrip("/")


def _write_results(state: AnthropicBatchState, batch: MessageBatch) -> None:
    path = state.spool.fresh("results")
    counts: dict[str, int] = {}
    answers: Iterator[bytes] = lines_of(batch.answers) if batch.answers else iter(())
    with path.open("wb") as out:
        for asked in batch.requests:
            # Each request that runs has its line, in order.
            answer = json.loads(next(answers)) if asked.fate == "succeeded" else None
            result = _result(asked, batch.cancel_at, answer)
            out.write(json.dumps(result, ensure_ascii=False).encode() + b"\n")
            kind = result["result"]["type"]
            counts[kind] = counts.get(kind, 0) + 1
            if asked.fate == "succeeded" and kind == "canceled":
                state.upstream.bill_only(asked.task.task_id, [])  # it never ran to its end
    batch.results, batch.counts = path, counts
    discard(batch.answers)
    batch.answers = None


def _result(
    request: BatchRequest, cancel_at: float | None, answer: dict[str, Any] | None
) -> dict[str, Any]:
    """One line of the results file; `answer`: the line of a request that runs."""
    task, fate = request.task, request.fate
    if fate == "succeeded" and cancel_at is not None and cancel_at < task.done_at:
        fate = "canceled"  # it had not finished when the cancel came: not billed
    if fate == "succeeded" and answer is not None:
        return answer
    if fate == "errored":
        error = {"type": "api_error", "message": "Internal server error"}
        result: dict[str, Any] = {"type": "errored", "error": {"type": "error", "error": error}}
    else:
        result = {"type": fate}
    return {"custom_id": request.custom_id, "result": result}


def answer_line(custom_id: str, message: dict[str, Any]) -> str:
    """The results line of a request that runs, as its message answers it (ASCII: a lone
    surrogate in a post's text is kept here, and refused, as before, with the results)."""
    return json.dumps({"custom_id": custom_id, "result": {"type": "succeeded", "message": message}})


def _end(batch: MessageBatch) -> float:
    """When an ended batch ended (monotonic): its cancel, or its last request's end."""
    if batch.cancel_at is not None:
        return batch.cancel_at
    return max(request.task.done_at for request in batch.requests)


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="microseconds").replace("+00:00", "Z")
