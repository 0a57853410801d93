"""The OpenAI Batch API: requests uploaded as a JSONL file (`POST {base}/files`, purpose
`batch`), one upstream batch made from it (`POST {base}/batches`), polled with
`GET {base}/batches/{id}`, its results read from the output and error files.

- One JSONL line per ledger batch, `custom_id` = the ledger batch id, its body the chat
  adapter's (the ≤ 25 posts under one prompt, the same response schema): the instructions are
  paid once per ledger batch, not once per post, and its answer is checked as a chat answer is
  (an invalid post is sent again alone, an unusable answer is split once).
- One upstream batch carries a submission's many lines (`submit`, `get_job`): its metadata
  names the submission and its key, so a job made but never written down is found again by
  listing the recent batches (`find_job`); recovery adopts it instead of asking to resubmit,
  and every submit looks first (a resend a person confirmed reuses the job if it exists).
  (`create`, `get_task`, `find_task`: one ledger batch per upstream batch, as batches were
  sent before submissions; kept for those still to be polled or adopted.)
- That look is not a guarantee: a batch just made may not be listed yet, so a create sent
  again at once could make (and pay for) a second one. So `honours_keys` is False, and:
  a fault on the listing or on `POST /files` is never a charge (nothing is made; a file
  costs nothing), raised as `TransportError(maybe_sent=False)` and retried safely; a fault
  on `POST /batches` that may have reached the upstream (no answer, 500, 502, 504) raises
  `AmbiguousCreate`, never retried at the request layer: the business layer looks for the
  batch by its metadata after a while, and recovery adopts it.
- Statuses: validating -> queued; in_progress, finalizing, cancelling -> running; completed,
  expired, cancelled -> ended, and each ledger batch's line says how it ended: answered (its
  output), errored (failed, taken as billed), or never run (`batch_expired` /
  `batch_cancelled`, or absent from an expired or cancelled batch: failed, not billed, as
  OpenAI bills only what ran); failed -> failed, not billed: OpenAI fails a batch only when
  its input file fails validation, before any request runs (the business layer gives the
  possible charge back).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    JobRequest,
    JobSnapshot,
    TaskSnapshot,
    TaskStatus,
)
from postledger.upstreams.errors import AmbiguousCreate, TransportError, UpstreamError
from postledger.upstreams.http import (
    HttpUpstream,
    accepted_body,
    gateway_retries_of,
    json_body,
    lost_answer,
)
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
    can_list = True
    carries_many = True
    max_poll_interval = 30.0  # a batch takes minutes to hours: no need to ask twice a second
    # A 503 means the request was not taken (overloaded); a 500, 502 or 504 may come after
    # the batch was made (a gateway timing out in front of it).
    statuses_that_may_charge = frozenset({500, 502, 504})
    base_url_hint = "the base URL with its version path, e.g. https://api.openai.com/v1"

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
        # Whatever was configured: the look before a create may miss a batch just made.
        self.honours_keys = False
        self.json_schema = json_schema
        self.completion_window = completion_window
        self.search_limit = search_limit

    async def create(self, request: CreateRequest) -> Created:
        """The upstream batch of this ledger batch: the one made before under this key if
        it is listed (no new charge), else a new one (paid).

        Raises `TransportError(maybe_sent=False)` for a fault before `POST /batches` (nothing
        made: safe to retry), and `AmbiguousCreate` when `POST /batches` may have made the
        batch but no answer says so (never to be retried blindly)."""
        batch_id, key = request.batch_id, request.idempotency_key
        try:
            found = await self.find_task(batch_id=batch_id, idempotency_key=key)
        except TransportError as exc:
            raise _costs_nothing(exc) from None
        if found is not None:
            return Created(found)
        line = self._line(batch_id, request.model, request.prompt, request.posts)
        return await self._make(f"{batch_id}.jsonl", line, metadata_of(batch_id, key))

    async def submit(self, job: JobRequest) -> Created:
        """The upstream batch of this submission, one request line per ledger batch: the one
        made before under its key if it is listed (no new charge), else a new one (paid).
        Raises as `create` does."""
        key = job.idempotency_key
        try:
            found = await self.find_job(submission_id=job.submission_id, idempotency_key=key)
        except TransportError as exc:
            raise _costs_nothing(exc) from None
        if found is not None:
            return Created(found)
        lines = "".join(
            self._line(batch_id, job.model, job.prompt, posts) for batch_id, posts in job.lines
        )
        metadata = submission_metadata(job.submission_id, key)
        return await self._make(f"{job.submission_id}.jsonl", lines, metadata)

    def _line(
        self, batch_id: str, model: str, prompt: str, posts: Sequence[tuple[str, str]]
    ) -> str:
        return request_line(batch_id, model, prompt, posts, self.json_schema)

    async def _make(self, filename: str, lines: str, metadata: dict[str, str]) -> Created:
        """Upload the requests and make the upstream batch of them (paid)."""
        try:
            uploaded = json_body(
                await self._send(
                    "POST",
                    "/files",
                    data={"purpose": "batch"},
                    files={"file": (filename, lines.encode(), "application/jsonl")},
                )
            )
        except TransportError as exc:
            raise _costs_nothing(exc) from None
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

    async def find_task(self, *, batch_id: str, idempotency_key: str) -> str | None:
        """The upstream batch made for this ledger batch alone (one made before submissions
        carried many) and key."""
        return await self._find(metadata_of(batch_id, idempotency_key))

    async def find_job(self, *, submission_id: str, idempotency_key: str) -> str | None:
        """The upstream batch made for this submission and key."""
        return await self._find(submission_metadata(submission_id, idempotency_key))

    async def _find(self, wanted: dict[str, str]) -> str | None:
        """Look through the most recent upstream batches (newest first, paging with `after`)
        for the one whose metadata holds `wanted`."""
        seen, after = 0, None
        while seen < self.search_limit:
            params: dict[str, Any] = {"limit": min(PAGE, self.search_limit - seen)}
            if after:
                params["after"] = after
            page = json_body(await self._send("GET", "/batches", params=params))
            data = [b for b in page.get("data") or [] if isinstance(b, dict)]
            for batch in data:
                metadata = batch.get("metadata") or {}
                if all(metadata.get(k) == v for k, v in wanted.items()):
                    return _text(batch.get("id"), "a listed batch has no id")
            seen += len(data)
            if not data or not page.get("has_more"):
                return None
            after = data[-1].get("id")
        return None

    async def get_task(self, task_id: str, *, wait: float = 0.0) -> TaskSnapshot:
        data, status = await self._look(task_id)
        if status is TaskStatus.FAILED:
            return _never_ran(task_id, data)
        if status is not TaskStatus.SUCCEEDED:
            return TaskSnapshot(task_id, status, None, None, None)
        return line_result(task_id, await self._ended_lines(data), str(data["status"]))

    async def get_job(self, job_id: str, batch_ids: Sequence[str]) -> JobSnapshot:
        """The submission's upstream batch; once ended, each ledger batch's line read as
        that batch's result (a batch with no line: never ran, or lost)."""
        data, status = await self._look(job_id)
        if status is TaskStatus.FAILED:
            return JobSnapshot(job_id, status, {b: _never_ran(job_id, data) for b in batch_ids})
        if status is not TaskStatus.SUCCEEDED:
            return JobSnapshot(job_id, status, {})
        of_batch: dict[str, list[dict[str, Any]]] = {}
        for line in await self._ended_lines(data):
            of_batch.setdefault(line["custom_id"], []).append(line)
        ended = str(data["status"])
        lines = {b: line_result(job_id, of_batch.get(b, []), ended) for b in batch_ids}
        return JobSnapshot(job_id, status, lines)

    async def _look(self, batch_id: str) -> tuple[dict[str, Any], TaskStatus]:
        data = json_body(await self._send("GET", f"/batches/{batch_id}", reads_task=True))
        status = _STATUS.get(str(data.get("status")))
        if status is None:
            raise UpstreamError(f"unexpected batch status {data.get('status')!r}")
        return data, status

    async def _ended_lines(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        """Every line of an ended batch: its output file's, then its error file's."""
        lines = await self._lines(data.get("output_file_id"))
        return lines + await self._lines(data.get("error_file_id"))

    async def _lines(self, file_id: Any) -> list[dict[str, Any]]:
        if not isinstance(file_id, str) or not file_id:
            return []
        # A file of the batch: a 404 means the upstream no longer has it, as for the batch.
        response = await self._send("GET", f"/files/{file_id}/content", reads_task=True)
        lines = []
        for text in response.text.splitlines():
            try:
                line = json.loads(text)
            except ValueError:
                continue  # a broken line names no post: that post ends up with no item
            if isinstance(line, dict) and isinstance(line.get("custom_id"), str):
                lines.append(line)
        return lines


# The codes of a request that never ran: its batch expired or was cancelled first.
NEVER_RAN = frozenset({"batch_expired", "batch_cancelled"})


def line_result(task_id: str, lines: list[dict[str, Any]], status: str) -> TaskSnapshot:
    """What an ended upstream batch gave its one request (the ledger batch's line): the chat
    answer as the batch's raw output, or why there is none, and whether that was billed."""
    if not lines:
        if status == "completed":  # a completed batch with no line: nothing to show for it
            return TaskSnapshot(task_id, TaskStatus.FAILED, None, None, "no output line")
        reason = f"the batch was {status} before its request ran (not billed)"
        return TaskSnapshot(task_id, TaskStatus.FAILED, None, None, reason, billed=False)
    if len(lines) > 1:  # made before one line per ledger batch: one line per post
        output, usage = assemble(lines, status)
        return TaskSnapshot(task_id, TaskStatus.SUCCEEDED, output, usage, None)
    body, error = batch_line(lines[0])
    if error is not None:
        if error.get("code") in NEVER_RAN:
            why = f"{request_error(error, status)} (not billed)"
            return TaskSnapshot(task_id, TaskStatus.FAILED, None, None, why, billed=False)
        return TaskSnapshot(task_id, TaskStatus.FAILED, None, None, request_error(error, status))
    content, usage, error_text = completion_result(body)
    if content is None:
        return TaskSnapshot(task_id, TaskStatus.FAILED, None, usage, error_text)
    return TaskSnapshot(task_id, TaskStatus.SUCCEEDED, content, usage, None)


def request_line(
    batch_id: str, model: str, prompt: str, posts: Sequence[tuple[str, str]], json_schema: bool
) -> str:
    """One ledger batch's line of a job's input file."""
    line = {
        "custom_id": batch_id,
        "method": "POST",
        "url": ENDPOINT,
        "body": chat_body(model, prompt, posts, json_schema),
    }
    return json.dumps(line, ensure_ascii=False) + "\n"


def _never_ran(task_id: str, data: dict[str, Any]) -> TaskSnapshot:
    """A batch that failed validation: OpenAI runs none of its requests, and bills none."""
    errors = (data.get("errors") or {}).get("data") or []
    why = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
    reason = f"the batch failed validation, no request ran (not billed): {why or 'no reason'}"
    return TaskSnapshot(task_id, TaskStatus.FAILED, None, None, reason, billed=False)


def _costs_nothing(exc: TransportError) -> TransportError:
    """A fault of a call that makes nothing paid (a listing, a file upload): safe to retry."""
    if not exc.maybe_sent:
        return exc
    return TransportError(
        str(exc), maybe_sent=False, status=exc.http_status, gateway_retries=exc.gateway_retries
    )


def _text(value: Any, why: str) -> str:
    if not isinstance(value, str) or not value:
        raise UpstreamError(why)
    return value
