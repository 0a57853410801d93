"""Anthropic's Message Batches API (`POST {root}/v1/messages/batches`), at half the price of
the Messages API, answered within 24 hours.

- One request of the Message Batch is one ledger batch: `custom_id` = the ledger batch id,
  `params` = the same Messages request as `anthropic_messages` (the prompt as the system
  prompt, the posts as one user message, the answer through one forced tool call). So the
  answer is checked like a chat answer: per-post retry of invalid items, one split of an
  unusable output.
- The Message Batch's id is the upstream task id, polled with `GET .../batches/{id}` until
  `processing_status` is `ended`; the results are read from its `results_url` (JSONL, one
  line per request: `succeeded` with the message, `errored`, `canceled` or `expired`).
  Requests that errored, were canceled or expired are not billed by Anthropic: such a batch
  fails with that reason and no usage, and the business rules retry it or end it.
- A Message Batch carries no metadata and the API takes no idempotency key, so a batch made
  but never written down cannot be found again: `can_list` and `honours_keys` are False, a
  create whose answer was lost is uncertain, and recovery asks a person before sending it
  again (docs/upstreams.md).

Errors are the Messages API's (`anthropic_messages`): 529 overloaded and 503 were not taken;
a 500, 502 or 504 on the create may hide a made batch; 429 waits; 401 and 403 stop the run; a
402 or a 400 about the credit balance stops it without a retry.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from postledger.upstreams.anthropic_messages import AnthropicUpstream
from postledger.upstreams.anthropic_protocol import message_result, messages_body
from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    JobRequest,
    JobSnapshot,
    TaskSnapshot,
    TaskStatus,
)
from postledger.upstreams.errors import UpstreamError
from postledger.upstreams.http import (
    accepted_body,
    gateway_retries_of,
    json_body,
    lost_answer,
)

_RUNNING = ("in_progress", "canceling")
# Why a request that did not succeed has no answer, in words for the ledger.
_NOT_RUN = {
    "canceled": "the Message Batch was canceled before this request ran (not billed)",
    "expired": "the Message Batch expired before this request ran (not billed)",
}


class AnthropicBatchClient(AnthropicUpstream):
    can_list = False  # a Message Batch carries no metadata to be found by
    carries_many = True
    max_poll_interval = 30.0  # a Message Batch takes minutes to hours

    @property
    def _batches(self) -> str:
        return f"{self._v1}/messages/batches"

    async def create(self, request: CreateRequest) -> Created:
        """Make the Message Batch of this ledger batch (paid once its request runs)."""
        params = messages_body(request.model, request.prompt, request.posts, self.max_tokens)
        return await self._make([{"custom_id": request.batch_id, "params": params}])

    async def submit(self, job: JobRequest) -> Created:
        """Make the Message Batch of a submission: one request per ledger batch."""
        return await self._make(
            [
                {
                    "custom_id": batch_id,
                    "params": messages_body(job.model, job.prompt, posts, self.max_tokens),
                }
                for batch_id, posts in job.lines
            ]
        )

    async def _make(self, requests: list[dict[str, Any]]) -> Created:
        response = await self._send("POST", self._batches, json={"requests": requests})
        made = accepted_body(response)
        if not isinstance(made.get("id"), str) or not made["id"]:
            raise lost_answer(response, "the upstream made the Message Batch but sent no id")
        return Created(str(made["id"]), gateway_retries=gateway_retries_of(response.headers))

    async def get_task(self, task_id: str, *, wait: float = 0.0) -> TaskSnapshot:
        data = await self._look(task_id)
        if data is None:
            return TaskSnapshot(task_id, TaskStatus.RUNNING, None, None, None)
        lines = await self._results(task_id, data.get("results_url"))
        if not lines:
            raise UpstreamError(f"Message Batch {task_id}'s results hold no result")
        return _line_result(task_id, lines[0])

    async def get_job(self, job_id: str, batch_ids: Sequence[str]) -> JobSnapshot:
        """The submission's Message Batch; once ended, each ledger batch's result line read as
        that batch's result (one with no line: lost, taken as billed)."""
        data = await self._look(job_id)
        if data is None:
            return JobSnapshot(job_id, TaskStatus.RUNNING, {})
        of_batch = {
            str(line.get("custom_id")): line
            for line in await self._results(job_id, data.get("results_url"))
        }
        missing = TaskSnapshot(job_id, TaskStatus.FAILED, None, None, "no result line")
        lines = {
            b: _line_result(job_id, of_batch[b]) if b in of_batch else missing for b in batch_ids
        }
        return JobSnapshot(job_id, TaskStatus.SUCCEEDED, lines)

    async def _look(self, task_id: str) -> dict[str, Any] | None:
        """The Message Batch once it has ended; None while it runs."""
        data = json_body(await self._send("GET", f"{self._batches}/{task_id}", reads_task=True))
        status = str(data.get("processing_status"))
        if status in _RUNNING:
            return None
        if status != "ended":
            raise UpstreamError(f"unexpected Message Batch status {status!r}")
        return data

    async def _results(self, task_id: str, results_url: Any) -> list[dict[str, Any]]:
        """The result lines of an ended Message Batch, one per request."""
        if not isinstance(results_url, str) or not results_url:
            raise UpstreamError(f"Message Batch {task_id} ended without a results_url")
        # The key goes only where it was configured to go: a results_url on another host
        # is refused, not followed.
        where, home = urlsplit(results_url), urlsplit(self.base_url)
        if where.netloc and (where.scheme, where.netloc) != (home.scheme, home.netloc):
            raise UpstreamError(
                f"Message Batch {task_id}'s results_url is on another host ({where.netloc}): "
                f"not sending the API key there"
            )
        query = f"?{where.query}" if where.query else ""
        url = f"{home.scheme}://{home.netloc}{where.path}{query}"  # absolute: whatever the base
        response = await self._send("GET", url, reads_task=True)
        lines = []
        for text in response.text.splitlines():
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if isinstance(line, dict):
                lines.append(line)
        return lines


def _line_result(task_id: str, line: dict[str, Any]) -> TaskSnapshot:
    """One request's result line as its ledger batch's result."""
    raw = line.get("result")
    result: dict[str, Any] = raw if isinstance(raw, dict) else {}
    kind = str(result.get("type"))
    if kind == "succeeded":
        output, usage, error = message_result(result.get("message"))
        if output is None:
            return TaskSnapshot(task_id, TaskStatus.FAILED, None, usage, error)
        return TaskSnapshot(task_id, TaskStatus.SUCCEEDED, output, usage, None)
    if kind == "errored":
        return TaskSnapshot(task_id, TaskStatus.FAILED, None, None, _errored(result), billed=False)
    if kind in _NOT_RUN:
        return TaskSnapshot(task_id, TaskStatus.FAILED, None, None, _NOT_RUN[kind], billed=False)
    # A result Anthropic does not document: taken as billed, the safe side.
    return TaskSnapshot(task_id, TaskStatus.FAILED, None, None, f"the request ended as {kind!r}")


def _errored(result: dict[str, Any]) -> str:
    """`{"type": "errored", "error": {"type": "error", "error": {"type", "message"}}}`."""
    outer = result.get("error")
    inner = outer.get("error") if isinstance(outer, dict) else None
    if isinstance(inner, dict):
        return f"errored: {inner.get('type')}: {inner.get('message')} (not billed)"
    return "errored (not billed)"
