"""The OpenAI Batch API: requests uploaded as a JSONL file (`POST {base}/files`, purpose
`batch`), one upstream batch made from it (`POST {base}/batches`), polled with
`GET {base}/batches/{id}`, its results read from the output and error files.

- One JSONL line per ledger batch, `custom_id` = the ledger batch id, its body the chat
  adapter's (the ≤ 25 posts under one prompt, the same response schema): the instructions are
  paid once per ledger batch, not once per post, and its answer is checked as a chat answer is
  (an invalid post is sent again alone, an unusable answer is split once).
- One upstream batch carries a submission's many lines (`submit`, `look_job`): its metadata
  names the submission and its key, so a job made but never written down is found again by
  listing the recent batches (`find_job`): recovery adopts it instead of asking to resubmit,
  and a resend of a submission a person confirmed looks first, and reuses the job it finds.
  (`create`, `look`, `find_task`: one ledger batch per upstream batch, as batches were sent
  before submissions; kept for those still to be polled or adopted.)
- That look is no guarantee: a batch just made may not be listed yet, so a create sent again
  at once could make (and pay for) a second one. So `honours_keys` is False, and: a fault on
  the listing or on `POST /files` is never a charge (nothing is made; a file costs nothing),
  raised as `TransportError(maybe_sent=False)` and retried safely; a fault on `POST /batches`
  that may have reached the upstream (no answer, 500, 502, 504) raises `AmbiguousCreate`,
  never retried at the request layer: the batch is looked for by its metadata after a while,
  and recovery adopts it. A listing that answers with something that is not a listing is no
  answer (`NoVerdict`): nothing is made again on the strength of it.
- Statuses: validating -> queued; in_progress, finalizing, cancelling -> running (with the
  upstream's `request_counts`); completed, expired, cancelled -> ended, and each ledger
  batch's line says how it ended: answered (its output), errored (failed, taken as billed),
  or never run (`batch_expired` / `batch_cancelled`: failed, not billed, as OpenAI bills
  only what ran); failed -> each line failed, not billed: OpenAI fails a batch only when its
  input file fails validation, before any request runs.
- What is not a verdict: a status OpenAI does not document, a body that is not a batch, an
  output or error file that cannot be read or is cut, a ledger batch with no line in an
  ended batch's files. Each is `NoVerdict`: the batch waits, and is read again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

from postledger.analysis import Analysis
from postledger.defaults import JOB_LIMITS
from postledger.settings import Settings, UpstreamKind
from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    Delivered,
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
from postledger.upstreams.errors import (
    AmbiguousCreate,
    TransportError,
    UpstreamError,
)
from postledger.upstreams.http import (
    HttpUpstream,
    accepted_body,
    answer_of,
    costs_nothing,
    gateway_retries_of,
    json_body,
    lost_answer,
    not_the_answer,
    request_counts,
)
from postledger.upstreams.job_files import LinesRead, RequestFile, ResultLines
from postledger.upstreams.openai_batch_per_post import assemble
from postledger.upstreams.openai_protocol import (
    batch_line,
    chat_body,
    completion_result,
    request_error,
)

BATCH_KEY = "postledger_batch"
SUBMISSION_KEY = "postledger_submission"
IDEMPOTENCY_KEY = "postledger_key"
ENDPOINT = "/v1/chat/completions"
PAGE = 100

_STATUS = {
    "validating": TaskStatus.QUEUED,
    "in_progress": TaskStatus.RUNNING,
    "finalizing": TaskStatus.RUNNING,
    "cancelling": TaskStatus.RUNNING,
    "completed": TaskStatus.SUCCEEDED,
    "expired": TaskStatus.SUCCEEDED,
    "cancelled": TaskStatus.SUCCEEDED,
    "failed": TaskStatus.FAILED,
}


def metadata_of(batch_id: str, idempotency_key: str) -> dict[str, str]:
    return {BATCH_KEY: batch_id, IDEMPOTENCY_KEY: idempotency_key}


def submission_metadata(submission_id: str, idempotency_key: str) -> dict[str, str]:
    return {SUBMISSION_KEY: submission_id, IDEMPOTENCY_KEY: idempotency_key}


class OpenAIBatchClient(HttpUpstream):
    kind = UpstreamKind.OPENAI_BATCH
    version_path = "/v1"  # as the openai SDK's base_url
    job_limits = JOB_LIMITS["openai_batch"]
    can_list = True
    sends_metadata = True
    carries_many = True
    # A batch takes minutes to hours: no need to ask twice a second.
    max_poll_interval: float | None = 30.0
    # A 503 means the request was not taken (overloaded); a 500, 502 or 504 may come after
    # the batch was made (a gateway timing out in front of it).
    statuses_that_may_charge = frozenset({500, 502, 504})
    base_url_hint = "the base URL with its version path, e.g. https://api.openai.com/v1"

    @classmethod
    def options_of(cls, settings: Settings) -> dict[str, Any]:
        return {
            "json_schema": settings.json_schema,
            "completion_window": settings.completion_window,
            "search_limit": settings.orphan_search_limit,
        }

    @classmethod
    def deadline(cls, settings: Settings) -> float:
        # A batch may take its whole completion window: giving up sooner would leave its paid
        # results unread.
        return max(settings.task_deadline, seconds_of(settings.completion_window) + 3600)

    @classmethod
    def request_bytes(
        cls, settings: Settings, batch_id: str, posts: Sequence[tuple[str, str]]
    ) -> int:
        line = request_line(
            batch_id, settings.model, settings.analysis_in_use(), posts, settings.json_schema
        )
        return len(line.encode())

    def __init__(
        self,
        base_url: str,
        *,
        json_schema: bool = True,
        completion_window: str = "24h",
        search_limit: int = 500,
        **options: Any,
    ) -> None:
        super().__init__(base_url, **options)
        # Whatever was configured: a look in the listing may miss a batch just made.
        self.honours_keys = False
        self.json_schema = json_schema
        self.completion_window = completion_window
        self.search_limit = search_limit

    async def create(self, request: CreateRequest) -> Created:
        """Make the upstream batch of one ledger batch (paid). (Batches are sent in
        submissions; this is the same job with one line, named by the ledger batch.)

        Raises `TransportError(maybe_sent=False)` for a fault before `POST /batches` (nothing
        made: safe to retry), and `AmbiguousCreate` when `POST /batches` may have made the
        batch but no answer says so (never to be retried blindly)."""
        batch_id, key = request.batch_id, request.idempotency_key
        line = self._line(batch_id, request.model, request.analysis, request.posts)
        with RequestFile([line]) as file:
            return await self._make(f"{batch_id}.jsonl", file, metadata_of(batch_id, key))

    async def submit(self, job: JobRequest) -> Created:
        """Make the upstream batch of this submission, one request line per ledger batch
        (paid). Raises as `create` does. Whether one was made before under its key is the
        caller's to ask first (`find_job`): a new key cannot have been used."""
        lines = (
            self._line(batch_id, job.model, job.analysis, posts) for batch_id, posts in job.lines
        )
        metadata = submission_metadata(job.submission_id, job.idempotency_key)
        with RequestFile(lines) as file:
            return await self._make(f"{job.submission_id}.jsonl", file, metadata)

    def _line(
        self, batch_id: str, model: str, analysis: Analysis, posts: Sequence[tuple[str, str]]
    ) -> str:
        return request_line(batch_id, model, analysis, posts, self.json_schema)

    async def _make(self, filename: str, lines: RequestFile, metadata: dict[str, str]) -> Created:
        """Upload the requests (streamed from disk) and make the upstream batch of them
        (paid)."""
        try:
            uploaded = json_body(
                await self._send(
                    "POST",
                    "/files",
                    data={"purpose": "batch"},
                    files={"file": (filename, lines.file, "application/jsonl")},
                )
            )
        except TransportError as exc:
            raise costs_nothing(exc) from None
        file_id = _text(uploaded.get("id"), "the upstream took the file but sent no id")
        try:
            response = await self._send(
                "POST",
                "/batches",
                json={
                    "input_file_id": file_id,
                    "endpoint": ENDPOINT,
                    "completion_window": self.completion_window,
                    "metadata": metadata,
                },
            )
            made = accepted_body(response)
            if not isinstance(made.get("id"), str) or not made["id"]:
                raise lost_answer(response, "the upstream made the batch but sent no id")
        except TransportError as exc:
            if not exc.maybe_sent:
                raise
            raise AmbiguousCreate(
                f"{exc}; the upstream batch may have been made (and charged): it is not sent "
                "again, it is looked for by its metadata instead",
                status=exc.http_status,
                gateway_retries=exc.gateway_retries,
            ) from None
        retried = gateway_retries_of(response.headers)
        return Created(str(made["id"]), gateway_retries=retried, file_id=file_id)

    # --- looking for a batch whose id was never saved -----------------------------------

    async def find_task(self, *, batch_id: str, idempotency_key: str) -> Found | NoVerdict:
        """The upstream batch made for this ledger batch alone (one made before submissions
        carried many) and key."""
        return await self._find(metadata_of(batch_id, idempotency_key))

    async def find_job(self, wanted: JobWanted) -> Found | NoVerdict:
        """The upstream batch made for this submission and key, by its metadata."""
        return await self._find(submission_metadata(wanted.submission_id, wanted.idempotency_key))

    async def _find(self, wanted: dict[str, str]) -> Found | NoVerdict:
        """Look through the most recent upstream batches (newest first, paging with `after`)
        for the one whose metadata holds `wanted`. A listing that cannot be read is no
        answer: nothing may be made again on the strength of it."""
        seen, after = 0, None
        while seen < self.search_limit:
            params: dict[str, Any] = {"limit": min(PAGE, self.search_limit - seen)}
            if after:
                params["after"] = after
            page = await self._page("/batches", params, "the list of batches")
            if isinstance(page, NoVerdict):
                return page
            data, has_more = page
            for batch in data:
                metadata = batch.get("metadata") or {}
                if isinstance(metadata, dict) and all(
                    metadata.get(k) == v for k, v in wanted.items()
                ):
                    if not isinstance(batch.get("id"), str) or not batch["id"]:
                        return not_the_answer("a listed batch has no id")
                    return Found(batch["id"])
            seen += len(data)
            if not data or not has_more:
                return Found(None)
            after = data[-1].get("id")
        return Found(None)

    # --- reads -----------------------------------------------------------------------------

    async def look(self, task_id: str, *, wait: float = 0.0) -> Look:
        """An upstream batch made for one ledger batch (before submissions carried many):
        every line of its files answers for that batch."""
        seen = await self._look(task_id)
        if not isinstance(seen, tuple):
            return seen
        data, status = seen
        if status is TaskStatus.FAILED:
            return _never_ran(data)
        if status is not TaskStatus.SUCCEEDED:
            return Running(status, request_counts(data))
        results = await self._ended_lines(data)
        if not isinstance(results, ResultLines):
            return results
        every = [line for key in results.ids() for line in results.lines_of(key)]
        return line_result(every, str(data["status"]))

    async def look_job(self, job_id: str, batch_ids: Sequence[str]) -> JobLook:
        """The submission's upstream batch; once it ended, each ledger batch's line read as
        that batch's result (a batch with no line has no verdict yet: its line is missing)."""
        seen = await self._look(job_id)
        if not isinstance(seen, tuple):
            return seen
        data, status = seen
        if status is TaskStatus.FAILED:
            return JobEnded({batch_id: _never_ran(data) for batch_id in batch_ids})
        if status is not TaskStatus.SUCCEEDED:
            return Running(status, request_counts(data))
        results = await self._ended_lines(data)
        if not isinstance(results, ResultLines):
            return results
        ended = str(data["status"])
        return JobEnded(LinesRead(results, batch_ids, lambda lines: line_result(lines, ended)))

    async def _look(self, batch_id: str) -> tuple[dict[str, Any], TaskStatus] | Unknown | NoVerdict:
        response = await self._read(f"/batches/{batch_id}")
        if not isinstance(response, httpx.Response):
            return response
        data = answer_of(response, f"batch {batch_id}")
        if isinstance(data, NoVerdict):
            return data
        status = _STATUS.get(str(data.get("status")))
        if status is None:
            said = data.get("status")
            return not_the_answer(f"batch {batch_id} has an unexpected status {said!r}")
        return data, status

    async def _ended_lines(self, data: dict[str, Any]) -> ResultLines | Unknown | NoVerdict:
        """Every line of an ended batch, by its `custom_id`: its output file's, then its
        error file's, streamed to disk. A file the upstream says it no longer has (OpenAI
        deletes a batch's files after their retention: its word on the results, as for the
        batch), or that cannot be read, is no verdict. A broken (or cut) line names no
        batch: that batch has no line yet."""
        results = ResultLines(_custom_id)
        for name in ("output_file_id", "error_file_id"):
            file_id = data.get(name)
            if file_id is None:
                continue
            if not isinstance(file_id, str) or not file_id:
                results.close()
                return not_the_answer(f"the batch's {name} is {file_id!r}")
            read = await self._download(f"/files/{file_id}/content", results)
            if read is not None:
                results.close()
                return read
        return results


def _custom_id(line: dict[str, Any]) -> str | None:
    custom_id = line.get("custom_id")
    return custom_id if isinstance(custom_id, str) else None


# The codes of a request that never ran: its batch expired or was cancelled first.
NEVER_RAN = frozenset({"batch_expired", "batch_cancelled"})


def line_result(lines: list[dict[str, Any]], status: str) -> Verdict | NoVerdict:
    """What an ended upstream batch says of one ledger batch, from that batch's lines: the
    chat answer as its raw output, or the upstream's "failed" (billed, or not for a request
    that never ran), or no verdict when its line is missing or is not a chat answer."""
    if not lines:
        return NoVerdict(
            NoVerdictReason.RESULTS_INCOMPLETE,
            f"the {status} batch's output and error files have no line for it",
        )
    if len(lines) > 1:  # made before one line per ledger batch: one line per post
        output, usage = assemble(lines, status)
        return Delivered(output, usage)
    body, error = batch_line(lines[0])
    if error is not None:
        if error.get("code") in NEVER_RAN:
            return UpstreamFailed(f"{request_error(error, status)} (not billed)", billed=False)
        return UpstreamFailed(request_error(error, status))
    return completion_result(body)


def request_line(
    batch_id: str,
    model: str,
    analysis: Analysis,
    posts: Sequence[tuple[str, str]],
    json_schema: bool,
) -> str:
    """One ledger batch's line of a job's input file."""
    line = {
        "custom_id": batch_id,
        "method": "POST",
        "url": ENDPOINT,
        "body": chat_body(model, analysis, posts, json_schema),
    }
    return json.dumps(line, ensure_ascii=False) + "\n"


def _never_ran(data: dict[str, Any]) -> UpstreamFailed:
    """A batch that failed validation: OpenAI runs none of its requests, and bills none."""
    errors = (data.get("errors") or {}).get("data") or []
    why = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
    reason = f"the batch failed validation, no request ran (not billed): {why or 'no reason'}"
    return UpstreamFailed(reason, billed=False)


def _text(value: Any, why: str) -> str:
    if not isinstance(value, str) or not value:
        raise UpstreamError(why)
    return value


def seconds_of(window: str) -> float:
    """'24h', '90m', '3600s' (OpenAI's completion windows) in seconds; unknown: 24 h."""
    units = {"h": 3600, "m": 60, "s": 1}
    number, unit = window[:-1], window[-1:]
    return float(number) * units[unit] if number.isdigit() and unit in units else 86_400.0
