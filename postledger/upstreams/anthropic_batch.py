"""Anthropic's Message Batches API (`POST {root}/v1/messages/batches`), at half the price of
the Messages API, answered within 24 hours.

- One request of the Message Batch is one ledger batch: `custom_id` = the ledger batch id,
  `params` = the same Messages request as `anthropic_messages` (the prompt as the system
  prompt, the posts as one user message, the answer through one forced tool call). So the
  answer is checked like a chat answer: per-post retry of invalid items, one split of an
  unusable output.
- The Message Batch's id is the upstream task id, polled with `GET .../batches/{id}` until
  `processing_status` is `ended`; the results are then read at the documented path
  `GET .../batches/{id}/results` through the configured base URL (JSONL, one line per
  request: `succeeded` with the message, `errored`, `canceled` or `expired`), never at the
  host its `results_url` names: behind a gateway that is the provider's own host, and the
  key goes only where it was configured to go. Requests that errored, were canceled or
  expired are not billed by Anthropic: such a batch fails with that reason and no usage, and
  the business rules retry it or end it. Anthropic keeps results for 29 days.
- No verdict: a status Anthropic does not document, a body that is not a Message Batch,
  results that cannot be read, are cut, or lack a request's line. The batch waits, with its
  id, and is read again.
- A Message Batch carries no metadata and the API takes no idempotency key (`honours_keys` is
  False), so a submission's Message Batch made but never written down is found by what it
  carries (`find_job`, `anthropic_batch_match`): each request's `custom_id` is its ledger
  batch id with a token of the submission's key, and a listed batch of the right time and
  size whose results hold exactly those ids is adopted, not paid again. One found nowhere is
  asked about before it is sent again (docs/upstreams.md).

Errors are the Messages API's (`anthropic_messages`): 529 overloaded and 503 were not taken;
a 500, 502 or 504 on the create may hide a made batch; 429 waits; 401 and 403 stop the run; a
402 or a 400 about the credit balance stops it without a retry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

import httpx

from postledger.defaults import JOB_LIMITS
from postledger.settings import Settings, UpstreamKind
from postledger.upstreams.anthropic_batch_match import (
    Listed,
    Window,
    batch_of_line,
    line_id,
    listed_as,
    results_are_its,
)
from postledger.upstreams.anthropic_messages import AnthropicUpstream
from postledger.upstreams.anthropic_protocol import message_result, messages_body
from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    Found,
    JobEnded,
    JobLook,
    JobRequest,
    JobWanted,
    Look,
    NoVerdict,
    NoVerdictReason,
    Running,
    TaskStatus,
    Unknown,
    UpstreamFailed,
    Verdict,
)
from postledger.upstreams.http import (
    accepted_body,
    answer_of,
    gateway_retries_of,
    lost_answer,
    not_the_answer,
    request_counts,
)
from postledger.upstreams.job_files import (
    LinesRead,
    RequestFile,
    ResultLines,
    json_array_parts,
)

_RUNNING = ("in_progress", "canceling")
# Why a request that did not succeed has no answer, in words for the ledger.
_NOT_RUN = {
    "canceled": "the Message Batch was canceled before this request ran (not billed)",
    "expired": "the Message Batch expired before this request ran (not billed)",
}


class AnthropicBatchClient(AnthropicUpstream):
    kind = UpstreamKind.ANTHROPIC_BATCH
    job_limits = JOB_LIMITS["anthropic_batch"]
    can_list = True  # a submission's Message Batch, by what it carries (`find_job`)
    carries_many = True
    max_poll_interval: float | None = 30.0  # a Message Batch takes minutes to hours
    page_size = 100

    @classmethod
    def options_of(cls, settings: Settings) -> dict[str, Any]:
        return {**super().options_of(settings), "search_limit": settings.orphan_search_limit}

    def __init__(self, base_url: str, *, search_limit: int = 500, **options: Any) -> None:
        super().__init__(base_url, **options)
        self.search_limit = search_limit

    @classmethod
    def deadline(cls, settings: Settings) -> float:
        # A Message Batch may take 24 h: giving up sooner would leave its paid results unread.
        return max(settings.task_deadline, 24 * 3600 + 3600)

    @classmethod
    def request_bytes(
        cls, settings: Settings, batch_id: str, posts: Sequence[tuple[str, str]]
    ) -> int:
        params = messages_body(
            settings.model, settings.analysis_in_use(), posts, settings.max_output_tokens
        )
        # Named as the create names it: the submission's key is drawn later, and every key's
        # token is as long (a batch id alone was 17 bytes short a request).
        return len(_request(line_id(batch_id, ""), params).encode()) + 1  # and its comma

    @property
    def _batches(self) -> str:
        return f"{self._v1}/messages/batches"

    async def create(self, request: CreateRequest) -> Created:
        """Make the Message Batch of this ledger batch (paid once its request runs)."""
        params = messages_body(request.model, request.analysis, request.posts, self.max_tokens)
        return await self._make([_request(request.batch_id, params)])

    async def submit(self, job: JobRequest) -> Created:
        """Make the Message Batch of a submission: one request per ledger batch."""
        return await self._make(
            _request(
                line_id(batch_id, job.idempotency_key),
                messages_body(job.model, job.analysis, posts, self.max_tokens),
            )
            for batch_id, posts in job.lines
        )

    async def _make(self, requests: Iterable[str]) -> Created:
        """The Message Batch of these requests (paid), its body written to disk as they are
        made and sent from it a block at a time."""
        with RequestFile(json_array_parts("requests", requests)) as body:
            response = await self._send(
                "POST",
                self._batches,
                content=body.blocks(),
                headers={"content-type": "application/json", "content-length": str(body.size)},
            )
        made = accepted_body(response)
        if not isinstance(made.get("id"), str) or not made["id"]:
            raise lost_answer(response, "the upstream made the Message Batch but sent no id")
        return Created(str(made["id"]), gateway_retries=gateway_retries_of(response.headers))

    async def look(self, task_id: str, *, wait: float = 0.0) -> Look:
        """A Message Batch made for one ledger batch: its one result is that batch's."""
        ended = await self._look(task_id)
        if not isinstance(ended, dict):
            return ended
        results = await self._results(task_id, _custom_id)
        if not isinstance(results, ResultLines):
            return results
        if not results.ids():
            return NoVerdict(
                NoVerdictReason.RESULTS_INCOMPLETE, f"Message Batch {task_id}'s results are empty"
            )
        return _line_result(results.lines_of(results.ids()[0])[0])

    async def look_job(self, job_id: str, batch_ids: Sequence[str]) -> JobLook:
        """The submission's Message Batch; once it ended, each ledger batch's result line
        read as that batch's result (one with no line has no verdict yet)."""
        ended = await self._look(job_id)
        if not isinstance(ended, dict):
            return ended
        results = await self._results(job_id, lambda line: batch_of_line(_custom_id(line)))
        if not isinstance(results, ResultLines):
            return results
        missing = NoVerdict(
            NoVerdictReason.RESULTS_INCOMPLETE,
            f"Message Batch {job_id}'s results have no line for it",
        )
        return JobEnded(
            LinesRead(
                results, batch_ids, lambda lines: _line_result(lines[-1]) if lines else missing
            )
        )

    async def find_job(self, wanted: JobWanted) -> Found | NoVerdict:
        """The submission's Message Batch, made by a run that never saved its id: listed
        newest first down to the window's start, each candidate of the window and size
        confirmed by its results' ids (`anthropic_batch_match`). A candidate still running,
        or whose results cannot be read yet, is no verdict: it may be the one."""
        window = Window.of(wanted, datetime.now(UTC))
        doubt: NoVerdict | None = None
        seen, after_id = 0, None
        while seen < self.search_limit:
            page = await self._listed(after_id)
            if isinstance(page, NoVerdict):
                return page
            batches, has_more = page
            for batch in batches:
                standing = listed_as(batch, wanted, window)
                if standing is Listed.UNREADABLE:
                    return not_the_answer(
                        f"listed Message Batch {batch['id']} has no creation time or counts"
                    )
                if standing is Listed.OLDER:
                    return doubt or Found(None)
                if standing is Listed.CANDIDATE:
                    confirmed = await self._confirmed(batch, wanted)
                    if isinstance(confirmed, Found):
                        return confirmed
                    doubt = doubt or confirmed
            seen += len(batches)
            if not batches or not has_more:
                break
            after_id = str(batches[-1].get("id"))
        return doubt or Found(None)

    async def _listed(self, after_id: str | None) -> tuple[list[dict[str, Any]], bool] | NoVerdict:
        """One page of `GET /v1/messages/batches` (newest first; `after_id`: the older ones)."""
        params: dict[str, Any] = {"limit": self.page_size}
        if after_id is not None:
            params["after_id"] = after_id
        page = await self._page(self._batches, params, "the list of Message Batches")
        if isinstance(page, NoVerdict):
            return page
        if any(not isinstance(b.get("id"), str) or not b["id"] for b in page[0]):
            return not_the_answer("a listed Message Batch has no id")
        return page

    async def _confirmed(
        self, batch: dict[str, Any], wanted: JobWanted
    ) -> Found | NoVerdict | None:
        """A candidate's verdict: the submission's (`Found`), not it (None), or not yet known
        (no verdict: it still runs, or its results could not be read)."""
        batch_id = str(batch["id"])
        if batch.get("processing_status") != "ended":
            return NoVerdict(
                NoVerdictReason.UNCONFIRMED,
                f"Message Batch {batch_id}, made in the window with "
                f"{len(wanted.batch_ids)} requests, is still running: its results will say "
                "whether it is this submission's",
            )
        results = await self._results(batch_id, _custom_id)
        if isinstance(results, Unknown):
            return None  # its results are gone: it cannot be told to be this one
        if isinstance(results, NoVerdict):
            return results
        with closing(results):
            if results.count < len(wanted.batch_ids):  # as many as its counts said: cut
                return NoVerdict(
                    NoVerdictReason.RESULTS_INCOMPLETE,
                    f"Message Batch {batch_id}'s results could not be read whole",
                )
            ids = (line_id for line_id in results.ids() for _ in results.lines_of(line_id))
            if results_are_its(ids, wanted):
                return Found(batch_id, by="by the requests it carries")
        return None

    async def _look(self, task_id: str) -> dict[str, Any] | Running | Unknown | NoVerdict:
        """The Message Batch once it has ended; `Running` while it runs."""
        response = await self._read(f"{self._batches}/{task_id}")
        if not isinstance(response, httpx.Response):
            return response
        data = answer_of(response, f"Message Batch {task_id}")
        if isinstance(data, NoVerdict):
            return data
        status = data.get("processing_status")
        if status in _RUNNING:
            return Running(TaskStatus.RUNNING, request_counts(data))
        if status != "ended":
            return not_the_answer(f"Message Batch {task_id} has an unexpected status {status!r}")
        return data

    async def _results(
        self, task_id: str, key_of: Callable[[dict[str, Any]], str]
    ) -> ResultLines | Unknown | NoVerdict:
        """The result lines of an ended Message Batch, one per request, by `key_of`, read at
        the documented path through the configured base URL (whatever host `results_url`
        names), streamed to disk. A line that is cut or not JSON is left out: its request
        has no verdict yet."""
        results = ResultLines(key_of)
        read = await self._download(f"{self._batches}/{task_id}/results", results)
        if read is not None:
            results.close()
            return read
        return results


def _request(custom_id: str, params: dict[str, Any]) -> str:
    """One request of a Message Batch's body, as JSON."""
    return json.dumps({"custom_id": custom_id, "params": params}, ensure_ascii=False)


def _custom_id(line: dict[str, Any]) -> str:
    return str(line.get("custom_id"))


def _line_result(line: dict[str, Any]) -> Verdict | NoVerdict:
    """One request's result line as its ledger batch's result."""
    raw = line.get("result")
    if not isinstance(raw, dict):
        return not_the_answer("a result line has no result")
    kind = str(raw.get("type"))
    if kind == "succeeded":
        return message_result(raw.get("message"))
    if kind == "errored":
        return UpstreamFailed(_errored(raw), billed=False)
    if kind in _NOT_RUN:
        return UpstreamFailed(_NOT_RUN[kind], billed=False)
    return not_the_answer(f"a result line ended as {kind!r}, which Anthropic does not document")


def _errored(result: dict[str, Any]) -> str:
    """`{"type": "errored", "error": {"type": "error", "error": {"type", "message"}}}`."""
    outer = result.get("error")
    inner = outer.get("error") if isinstance(outer, dict) else None
    if isinstance(inner, dict):
        return f"errored: {inner.get('type')}: {inner.get('message')} (not billed)"
    return "errored (not billed)"
