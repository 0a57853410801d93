"""An OpenAI batch as the simulator shows it: its batch object, with its `request_counts`
rising while it runs, and, once it ended, its output and error files.

A batch runs all its requests as one simulated task; when it is first seen ended, its output
and error files are written, one line per request (its `custom_id`), and the charge is
settled (`simulator.openai_batch_finish`).
"""

from __future__ import annotations

import math
import time
from typing import Any

from simulator.openai_batch_finish import finish_batch
from simulator.openai_state import OpenAIState, SimBatch

ENDPOINT = "/v1/chat/completions"


def batch_body(state: OpenAIState, batch: SimBatch) -> dict[str, Any]:
    """The batch object; asking for it is what finishes a batch that ended."""
    now = time.monotonic()
    status = batch.status(now)
    ended = status in ("completed", "failed", "expired", "cancelled")
    if ended:
        with state.lock:
            finish_batch(state, batch, status)
    stamp = int(time.time())
    failed = [{"code": "batch_failed", "line": None, "param": None, "message": "The batch failed."}]
    errors = {"object": "list", "data": batch.line_errors or failed} if status == "failed" else None
    # A field that has no value yet is left out, as OpenAI's document describes a batch
    # (its optional fields are not nullable); readers must not count on either.
    body = {
        "id": batch.id,
        "object": "batch",
        "endpoint": ENDPOINT,
        "errors": errors,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": status,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": batch.created_at,
        "in_progress_at": batch.created_at if status != "validating" else None,
        "expires_at": batch.created_at + 86_400,
        "completed_at": stamp if status == "completed" else None,
        "failed_at": stamp if status == "failed" else None,
        "expired_at": stamp if status == "expired" else None,
        "cancelled_at": stamp if status == "cancelled" else None,
        "request_counts": batch.counts or running_counts(batch, now),
        "metadata": batch.metadata,
    }
    return {name: value for name, value in body.items() if value is not None}


def running_counts(batch: SimBatch, now: float) -> dict[str, int]:
    """A batch's `request_counts` before it ended: its requests end one after another, evenly
    over the time it runs (after its tenth of the latency validating), in their order, as
    OpenAI's counts rise while a batch is in progress. The last one ends with the batch."""
    total, task = len(batch.requests), batch.task
    running_from = task.created + (task.done_at - task.created) / 10
    if math.isinf(task.done_at) or now <= running_from:
        ended = 0  # validating, or held: nothing has run yet
    elif task.done_at <= running_from:  # no time to run in (a batch failed at once)
        ended = total
    else:
        ended = min(total, int(total * (now - running_from) / (task.done_at - running_from)))
    failed = sum(
        custom_id == batch.failed_request or custom_id in batch.refused
        for custom_id, _ in batch.requests[:ended]
    )
    return {"total": total, "completed": ended - failed, "failed": failed}
