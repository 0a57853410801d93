"""An OpenAI batch that ended, finished: its output and error files written and its bill
settled, once, the first time it is seen ended (`simulator.openai_batch_output.batch_body`).

Its lines file (`simulator.openai_batch_lines`) is read a line at a time, and each request's
output or error line written to disk as it is read: one line per request (its `custom_id`),
each answering for the posts of its own chat request. The charge is settled as it was when the
whole output was split at once: by the usage its answers report, or, expired or cancelled,
for the requests that ran (the first half), as `Upstream.bill_only` counts them.

Each line that runs meets the prompt cache as a chat completion would (the batch's prompt,
`simulator.caching`), in the order the lines are answered, here, when the batch is finished:
the first line of a long prompt records it, the next ones read it. Its money is per line: the
charge of a completed batch costs the sum of its output lines' costs, each rounded up on its
own at the Batch API's price (`simulator.billing`), as a client pricing each answer pays. An
expired or cancelled batch is billed as before, by tokens counted as `bill_only` counts them:
as one request of the prompt (once) and the posts that ran, uncached.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from simulator.billing import BATCH_DISCOUNT, Usage, request_cost
from simulator.caching import Prefix
from simulator.model import count_tokens, list_length, tokens_in
from simulator.openai_batch_lines import BatchLines, Gathered, LineRecord, gathered
from simulator.openai_chat import answer_text, completion
from simulator.openai_state import OpenAIState, SimBatch, new_id
from simulator.openai_strict import refusal_body
from simulator.outputs import spoil_output
from simulator.spool import discard

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


def finish_batch(state: OpenAIState, batch: SimBatch, status: str) -> None:
    """Write the output and error files of a batch that ended (once), and settle its bill."""
    task, upstream = batch.task, state.upstream
    if status == "failed":  # failed validation: nothing ran, and nothing is billed
        upstream.bill_only(task.task_id, [])
        return
    if batch.output_file_id or batch.error_file_id or batch.lines is None:
        return
    ran = len(batch.requests) if status == "completed" else len(batch.requests) // 2
    written = _Written(state.spool.fresh("output"), state.spool.fresh("error"))
    try:
        _write(state, batch, status, ran, written)
    except BaseException:
        discard(written.out_path, written.error_path)
        raise
    for path, count, name in (
        (written.out_path, written.out, "output"),
        (written.error_path, written.errors, "error"),
    ):
        if not count:
            discard(path)
            continue
        made = state.add_file(
            f"{batch.id}_{name}.jsonl", "batch_output", path, path.stat().st_size, batch.id
        )
        if name == "output":
            batch.output_file_id = made.id
        else:
            batch.error_file_id = made.id
    batch.counts = {
        "total": len(batch.requests),
        "completed": written.out,
        "failed": written.errors,
    }
    if status != "completed":  # expired or cancelled: billed for the requests that ran
        billed = written.billed
        upstream.rebill(
            task.task_id,
            billed.post_ids,
            batch.lines.prompt_tokens + billed.tokens,
            tokens_in(list_length(billed.item_chars, len(billed.post_ids))),
        )
    elif written.out:  # billed as its answers report their usage, each at its own cost
        upstream.bill_usage(task.task_id, written.usage, written.cost)


@dataclass
class _Billed:
    """The running posts a batch that ended early is billed for, as `bill_only` finds them:
    each post whose id one of the requests that ran carries."""

    post_ids: list[str] = field(default_factory=list)
    tokens: int = 0
    item_chars: int = 0  # their unspoiled items' JSON, in all
    _ran_dups: set[str] = field(default_factory=set)

    def add(self, record: LineRecord, ran: bool, dups: frozenset[str]) -> None:
        if ran:
            self._ran_dups.update(post_id for post_id in record.post_ids if post_id in dups)
        if record.refused:
            return
        at = [
            index
            for index, post_id in enumerate(record.post_ids)
            if ran or post_id in self._ran_dups
        ]
        if not at:
            return
        self.post_ids.extend(record.post_ids[index] for index in at)
        self.tokens += sum(record.tokens[index] for index in at)
        listed = len(json.dumps([record.items[index] for index in at], ensure_ascii=False))
        self.item_chars += listed - list_length(0, len(at))


@dataclass
class _Written:
    out_path: Path
    error_path: Path
    out: int = 0
    errors: int = 0
    usage: Usage = Usage(0, 0)  # the usage the output's answers report, in all
    cost: int = 0  # what they cost, each rounded up on its own
    billed: _Billed = field(default_factory=_Billed)


def _write(state: OpenAIState, batch: SimBatch, status: str, ran: int, written: _Written) -> None:
    """One line per request, in order: the first `ran` of them run."""
    lines = batch.lines
    assert lines is not None
    found, now = gathered(lines), time.monotonic()
    with (
        written.out_path.open("w", encoding="utf-8") as out,
        written.error_path.open("w", encoding="utf-8") as errors,
    ):
        for index, record in enumerate(lines.records()):
            custom_id = record.custom_id
            line: dict[str, Any] = {"id": new_id("batch_req"), "custom_id": custom_id}
            if record.refused:  # refused at once, as OpenAI refuses such a request
                body = refusal_body(batch.refused[custom_id])
                response = {"status_code": 400, "request_id": new_id("req"), "body": body}
                _put(errors, {**line, "response": response, "error": None})
                written.errors += 1
            elif index >= ran:
                code, message = UNDONE[status]
                error = {"code": code, "message": message}
                _put(errors, {**line, "response": None, "error": error})
                written.errors += 1
            elif custom_id == batch.failed_request:
                response = {"status_code": 500, "request_id": new_id("req"), "body": _SERVER_ERROR}
                _put(errors, {**line, "response": response, "error": None})
                written.errors += 1
            else:
                response, usage = _answered(state, batch, lines, record, found, now)
                _put(out, {**line, "response": response, "error": None})
                written.out += 1
                written.usage += usage
                written.cost += request_cost(batch.task.model, usage, BATCH_DISCOUNT)
            if status != "completed":
                written.billed.add(record, index < ran, lines.dups)


def _put(file: TextIO, line: dict[str, Any]) -> None:
    file.write(json.dumps(line, ensure_ascii=False) + "\n")


def _answered(
    state: OpenAIState,
    batch: SimBatch,
    lines: BatchLines,
    record: LineRecord,
    found: Gathered,
    now: float,
) -> tuple[dict[str, Any], Usage]:
    """The 200 response of one request that ran, and its usage: the chat completion of its
    own posts' items; its prompt counts the prompt and each of its posts' text, the prompt
    read from the cache if it was there at `now` (`Upstream.use_cache`)."""
    task, special = batch.task, lines.special
    own: list[Any] = []
    prompt_tokens = lines.prompt_tokens
    for post_id, tokens, item in zip(record.post_ids, record.tokens, record.items, strict=True):
        if post_id in special:
            own.extend(found.items.get(post_id, []))
            prompt_tokens += found.tokens[post_id]
        else:
            own.append(item)
            prompt_tokens += tokens
    text = json.dumps(own, ensure_ascii=False)
    if batch.spoiled_request is not None and batch.spoiled_request[0] == record.custom_id:
        fault = batch.spoiled_request[1]
        text = spoil_output(text, fault, state.faults.pick, task.schema).text
    content = answer_text(text, json_mode=batch.json_mode)
    cached = state.upstream.use_cache(task.model, Prefix(task.prompt), now).read
    usage = Usage(prompt_tokens - cached, count_tokens(content), cached)
    body = completion(task.model, content, usage)
    return {"status_code": 200, "request_id": new_id("req"), "body": body}, usage
