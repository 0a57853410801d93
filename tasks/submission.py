"""A submission's whole life as one `process-submission` task run, tagged `ai-batch`: on a Batch
API one upstream job carries many ledger batches (one request line each), and the tag's slot
covers that job's whole life, from the first batch marked running to the last line settled
(docs/rules.md, "a slot on a Batch API").

Each batch is marked running (R3) in start order until the job is full or one may not start
(the breaker, the budget: it and those after it stay queued, R9). The submission is written
down before the upstream is called; the job id is saved on it and on each batch the moment it
is known (R23). When the job ends, each batch's line settles that batch by the same rules as a
batch sent alone (`tasks/settle.py`): its output saved before it is checked, an invalid post
sent again, an unusable answer split once (the halves go into a later submission), a line that
never ran back to the queue unbilled. A failure of the job itself is each of its batches'
failure; the breaker hears of it once.
"""

from __future__ import annotations

import uuid
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State

from postledger.guards.spill import SpillFailed, SpillKind, spill_for
from postledger.ledger import Ledger, open_ledger
from postledger.record.crash import CrashPoint, crash_point
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchRecord, BatchStatus, SubmissionRecord
from postledger.settings import Settings, current_settings
from postledger.upstreams import can_list, request_bytes
from postledger.upstreams.calls import JobSnapshot
from postledger.upstreams.errors import AmbiguousCreate, UpstreamError
from postledger.upstreams.openai_batch import submission_metadata
from tasks.batch import BATCH_TAG
from tasks.outcome import (
    BatchOutcome,
    LedgerFailed,
    SubmissionEnded,
    submission_state,
)
from tasks.settle import (
    RunLogger,
    Trip,
    count_gateway_retries,
    failure_of_snapshot,
    mark_sent,
    settle_failure,
    settle_output,
)
from tasks.upstream_calls import (
    find_upstream_job,
    submit_upstream_job,
    wait_for_upstream_job,
    with_request_retries,
)

# Room kept in a job's file for the next line before it is marked running (its size is known
# only then): its posts may be up to max_batch_chars characters, each up to 7 bytes once
# escaped twice (a control character in the posts' JSON, inside the line's JSON), under the
# prompt and the JSON around them.
_BYTES_PER_CHAR = 7
_LINE_OVERHEAD = 8192


def new_submission_id(month: str) -> str:
    return f"{month}-s{uuid.uuid4().hex[:8]}"


@task(
    name="process-submission",
    task_run_name="{submission_id}",
    tags=[BATCH_TAG],
    cache_policy=NO_CACHE,
    persist_result=False,
)
async def process_submission(
    submission_id: str,
    batch_ids: list[str],
    ledger_url: str,
    holder: str | None = None,
    job_id: str | None = None,
) -> State[Any]:
    """Send the batches, in order, as one upstream job and settle each from its line. With
    `job_id`, they were sent by an earlier, interrupted run in that job, whose id is saved:
    poll it, send nothing (R23). `holder`: the run's claim on the month."""
    ledger, settings = open_ledger(ledger_url), current_settings()
    run = _Submission(submission_id, ledger, settings, get_run_logger())
    if job_id is not None:
        batches = [ledger.batch(batch_id) for batch_id in batch_ids]
        outcomes = await run.settle_job(batches, job_id)
        return submission_state(SubmissionEnded(submission_id, tuple(batch_ids), outcomes))
    marked, not_started = run.mark(batch_ids, holder)
    outcomes = await run.send(marked) if marked else ()
    ended = SubmissionEnded(submission_id, tuple(batch_ids), outcomes, not_started)
    return submission_state(ended)


class _Submission:
    def __init__(
        self, submission_id: str, ledger: Ledger, settings: Settings, logger: RunLogger
    ) -> None:
        self.id, self.ledger, self.settings, self.logger = submission_id, ledger, settings, logger

    def mark(
        self, batch_ids: list[str], holder: str | None
    ) -> tuple[list[BatchRecord], BatchOutcome | None]:
        """Mark the batches running in start order while the job has room; stop at the first
        that may not start (it, and those after it, stay queued: nothing was paid)."""
        settings = self.settings
        most_lines, most_bytes = settings.submission_limits()
        next_line = (
            _BYTES_PER_CHAR * settings.max_batch_chars
            + 2 * len(settings.prompt.encode())
            + _LINE_OVERHEAD
        )
        marked: list[BatchRecord] = []
        size = 0
        for batch_id in batch_ids[:most_lines]:
            if marked and size + next_line > most_bytes:
                break
            batch = mark_sent(self.ledger, batch_id, settings, holder)
            if not isinstance(batch, BatchRecord):
                return marked, batch
            marked.append(batch)
            posts = [(pid, text) for pid, text in batch.request or []]
            size += request_bytes(settings, batch.batch_id, posts)  # as it will be sent
        return marked, None

    async def send(self, batches: list[BatchRecord]) -> tuple[BatchOutcome, ...]:
        """Write the submission down, make its job (paid), and settle each batch from it."""
        crash_point(CrashPoint.AFTER_RUNNING)
        key = uuid.uuid4().hex
        metadata = submission_metadata(self.id, key) if can_list(self.settings) else {}
        record = SubmissionRecord(
            submission_id=self.id,
            month=batches[0].month,
            idempotency_key=key,
            batch_ids=[b.batch_id for b in batches],
            metadata_sent=metadata,
        )
        try:
            self.ledger.record_submission(record)
        except LedgerUnavailable as exc:  # marked running, nothing sent: uncertain to recovery
            return tuple(LedgerFailed(b.batch_id, BatchStatus.RUNNING, str(exc)) for b in batches)
        lines = [(b.batch_id, [(pid, text) for pid, text in b.request or []]) for b in batches]
        try:
            created = await with_request_retries(submit_upstream_job, self.settings)(
                self.id, lines, key, self.ledger.url
            )
            job_id, file_id = created.task_id, created.file_id
            count_gateway_retries(self._trip(batches[0]), created.gateway_retries)
        except AmbiguousCreate as exc:
            # It may have been made: look for it by its metadata once the upstream lists it,
            # never make it again here (R24). Not found: uncertain, for recovery to look again.
            job_id = await self._look_for_job(key) if can_list(self.settings) else None
            if job_id is None:
                return self._each_failed(batches, exc)
            return await self._keep_job_id(batches, job_id, None, adopted=True)
        except UpstreamError as exc:
            return self._each_failed(batches, exc)
        crash_point(CrashPoint.AFTER_CREATE)
        if job_id is None:
            return self._each_failed(batches, UpstreamError("the upstream made no job id"))
        return await self._keep_job_id(batches, job_id, file_id, adopted=False)

    async def _look_for_job(self, key: str) -> str | None:
        found: str | None = await with_request_retries(find_upstream_job, self.settings)(
            self.id, key, settle=self.settings.create_settle
        )
        return found

    async def _keep_job_id(
        self, batches: list[BatchRecord], job_id: str, file_id: str | None, *, adopted: bool
    ) -> tuple[BatchOutcome, ...]:
        """R23, R20: the job id in the ledger, or else in the spill file for each batch (and
        no new batch starts); then the job is waited for."""
        why = (
            f"found upstream job {job_id} by its metadata after an answer to its create was "
            "lost; it is polled, not paid again"
            if adopted
            else None
        )
        ledger_failure = None
        try:
            self.ledger.record_job_id(self.id, job_id, file_id=file_id, adopted=why)
        except LedgerUnavailable as exc:
            ledger_failure = str(exc)
            for batch in batches:
                spill_for(self.settings, batch.batch_id).add(
                    SpillKind.TASK_ID, batch.batch_id, task_id=job_id
                )
            self.logger.error("%s: job id %s kept in the spill file: %s", self.id, job_id, exc)
        crash_point(CrashPoint.AFTER_TASK_ID)
        return await self.settle_job(batches, job_id, ledger_failure)

    async def settle_job(
        self, batches: list[BatchRecord], job_id: str, ledger_failure: str | None = None
    ) -> tuple[BatchOutcome, ...]:
        """Wait for the job to end; then each batch settled from its own line."""
        ids = [b.batch_id for b in batches]
        try:
            job: JobSnapshot = await with_request_retries(wait_for_upstream_job, self.settings)(
                self.id, job_id, ids, self.ledger.url
            )
        except UpstreamError as exc:
            return self._each_failed(batches, exc, ledger_failure)
        outcomes = []
        for batch in batches:
            trip = self._trip(batch, ledger_failure)
            line = job.lines[batch.batch_id]
            try:
                if line.output is None:
                    failure = failure_of_snapshot(line)
                    outcome = settle_failure(trip, failure, upstream=self.settings.breaker_name())
                else:
                    outcome = settle_output(trip, line, job_id)
            except (LedgerUnavailable, SpillFailed) as exc:
                self.logger.critical("%s: %s", batch.batch_id, exc)
                outcome = LedgerFailed(batch.batch_id, BatchStatus.RUNNING, str(exc))
            outcomes.append(outcome)
        return tuple(outcomes)

    def _each_failed(
        self, batches: list[BatchRecord], exc: UpstreamError, ledger_failure: str | None = None
    ) -> tuple[BatchOutcome, ...]:
        """The job's failure as each of its batches' own; its breaker hears of it once."""
        outcomes = []
        for nth, batch in enumerate(batches):
            upstream = self.settings.breaker_name() if nth == 0 else None
            try:
                outcomes.append(
                    settle_failure(self._trip(batch, ledger_failure), exc, upstream=upstream)
                )
            except LedgerUnavailable as ledger_exc:
                outcomes.append(LedgerFailed(batch.batch_id, BatchStatus.RUNNING, str(ledger_exc)))
        return tuple(outcomes)

    def _trip(self, batch: BatchRecord, ledger_failure: str | None = None) -> Trip:
        return Trip(self.ledger, batch, self.settings, self.logger, ledger_failure)
