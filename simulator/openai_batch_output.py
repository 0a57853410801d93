"""An OpenAI batch as the simulator shows it: its batch object and, once it ended, its output
and error files and its final bill.

A batch runs all its requests as one simulated task; when it is first seen ended, that task's
output is split into one output line per request (its `custom_id`), each answering for the
posts of its own chat request, and the charge is settled: by the usage its answers report, or,
expired or cancelled, for the requests that ran.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from simulator.model import count_tokens
from simulator.openai_chat import answer_text, completion
from simulator.openai_state import OpenAIState, SimBatch, new_id
from simulator.openai_strict import refusal_body
from simulator.outputs import spoil_output

ENDPOINT = "/v1/chat/completions"
# Why a request that never ran is in the error file: (error code, message), by batch status.
UNDONE = {
    "expired": (
        "batch_expired",
        "This request could not be executed before the completion window expired.",
    ),
    "cancelled": ("batch_cancelled", "This request was not executed: the batch was cancelled."),
}
_SERVER_ERROR = {
    "error": {
        "message": "The server had an error processing your request.",
        "type": "server_error",
        "param": None,
        "code": "server_error",
    }
}


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


def finish_batch(state: OpenAIState, batch: SimBatch, status: str) -> None:
    """Write the output and error files of a batch that ended (once), and settle its bill."""
    task, upstream = batch.task, state.upstream
    if status == "failed":  # failed validation: nothing ran, and nothing is billed
        upstream.bill_only(task.task_id, [])
        return
    if batch.output_file_id or batch.error_file_id:
        return
    requests = batch.requests
    ran = len(requests) if status == "completed" else len(requests) // 2  # the first ones
    out, errors = _result_lines(state, batch, status, ran)
    if out:
        batch.output_file_id = state.add_file(
            f"{batch.id}_output.jsonl", "batch_output", _jsonl(out), batch.id
        ).id
    if errors:
        batch.error_file_id = state.add_file(
            f"{batch.id}_error.jsonl", "batch_output", _jsonl(errors), batch.id
        ).id
    batch.counts = {"total": len(requests), "completed": len(out), "failed": len(errors)}
    if status != "completed":  # expired or cancelled: billed for the requests that ran
        upstream.bill_only(task.task_id, [post for _, ids in requests[:ran] for post in ids])
    elif out:  # billed as its answers report their usage
        usages = [line["response"]["body"]["usage"] for line in out]
        upstream.bill_usage(
            task.task_id,
            sum(u["prompt_tokens"] for u in usages),
            sum(u["completion_tokens"] for u in usages),
        )


def _result_lines(
    state: OpenAIState, batch: SimBatch, status: str, ran: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(output lines, error lines): one line per request, the first `ran` of them run."""
    try:
        items = json.loads(batch.task.output)
    except ValueError:
        items = None
    of_post = _items_by_post(items) if isinstance(items, list) else None
    texts = dict(batch.task.posts)
    out, errors = [], []
    for index, (custom_id, post_ids) in enumerate(batch.requests):
        line: dict[str, Any] = {"id": new_id("batch_req"), "custom_id": custom_id}
        if custom_id in batch.refused:  # refused at once, as OpenAI refuses such a request
            body = refusal_body(batch.refused[custom_id])
            response = {"status_code": 400, "request_id": new_id("req"), "body": body}
            errors.append({**line, "response": response, "error": None})
        elif index >= ran:
            code, message = UNDONE[status]
            errors.append({**line, "response": None, "error": {"code": code, "message": message}})
        elif custom_id == batch.failed_request:
            response = {"status_code": 500, "request_id": new_id("req"), "body": _SERVER_ERROR}
            errors.append({**line, "response": response, "error": None})
        else:
            response = _answered(state, batch, custom_id, post_ids, of_post, texts)
            out.append({**line, "response": response, "error": None})
    return out, errors


def _items_by_post(items: list[Any]) -> dict[Any, list[Any]]:
    """The output's items by post id, found in one pass (a job may carry thousands of requests
    and 100 000 items)."""
    of_post: dict[Any, list[Any]] = {}
    for item in items:
        if isinstance(item, dict):
            of_post.setdefault(item.get("id"), []).append(item)
    return of_post


def _answered(
    state: OpenAIState,
    batch: SimBatch,
    custom_id: str,
    post_ids: list[str],
    of_post: dict[Any, list[Any]] | None,
    texts: dict[str, str],
) -> dict[str, Any]:
    """The 200 response of one request that ran: the chat completion of its own posts' items
    (or, the output not being a JSON list, of the whole output); `texts`: each post's text."""
    task = batch.task
    own = None if of_post is None else [item for pid in post_ids for item in of_post.get(pid, [])]
    text = task.output if own is None else json.dumps(own, ensure_ascii=False)
    if batch.spoiled_request is not None and batch.spoiled_request[0] == custom_id:
        fault = batch.spoiled_request[1]
        text = spoil_output(text, fault, state.faults.pick, task.schema).text
    content = answer_text(text, json_mode=batch.json_mode)
    prompt_tokens = count_tokens(task.prompt) + sum(
        count_tokens(texts[post_id]) for post_id in post_ids
    )
    return {
        "status_code": 200,
        "request_id": new_id("req"),
        "body": completion(task.model, content, prompt_tokens, count_tokens(content)),
    }


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
