"""The month's `process-batch` task runs in flight (on a Batch API, `process-submission` runs,
each carrying many batches), and their ends in the order they come (R9).

Each batch (or submission) is one task run under the `ai-batch` tag; Prefect gives its slot
back in the task engine before the run's future resolves, so when the flow hears of an end the
slot is free and the next batch takes it without waiting on the tag. The flow learns of ends
from done-callbacks rather than by reading each future's state (a read of an unfinished future
is an API call).
"""

from __future__ import annotations

import queue
from types import TracebackType
from typing import Any

from prefect.futures import PrefectFuture

from postledger.settings import Settings
from postledger.trip import (
    Crashed,
    Ended,
    HeldByBreaker,
    LedgerFailed,
    OverBudget,
    Settled,
    StopsRun,
    SubmissionEnded,
)
from tasks.batch import process_batch
from tasks.submission import process_submission

# How long leaving waits for task runs still in flight.
SETTLE_SECONDS = 30.0


class BatchRuns:
    """Start a batch's task run; take back the ends of those in flight."""

    def __init__(self, settings: Settings, ledger_url: str, holder: str | None = None) -> None:
        self._settings, self._ledger_url = settings, ledger_url
        self._holder = holder  # the run's claim on its month, checked as each batch starts
        self._ended: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.in_flight: dict[str, PrefectFuture[Any]] = {}  # by batch or submission id
        self._carried: dict[str, tuple[str, ...]] = {}  # a submission's batches, by its id

    def __enter__(self) -> BatchRuns:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            for future in self.in_flight.values():
                future.wait(timeout=SETTLE_SECONDS)

    def start(self, batch_id: str, *, resume: bool = False) -> None:
        """`resume`: the batch was sent by an interrupted run; poll its saved task (R23)."""
        future = process_batch.submit(
            batch_id, self._settings, self._ledger_url, resume=resume, holder=self._holder
        )
        self.in_flight[batch_id] = future
        future.add_done_callback(lambda _future: self._ended.put(batch_id))

    def start_submission(
        self,
        submission_id: str,
        batch_ids: list[str],
        *,
        job_id: str | None = None,
        resend: bool = False,
    ) -> None:
        """`job_id`: the batches were sent by an interrupted run in that job; poll it (R23).
        `resend`: they were sent by an interrupted run in this submission, its job's id never
        saved, and a person said send them again (R24)."""
        future = process_submission.submit(
            submission_id,
            batch_ids,
            self._settings,
            self._ledger_url,
            holder=self._holder,
            job_id=job_id,
            resend=resend,
        )
        self.in_flight[submission_id] = future
        self._carried[submission_id] = tuple(batch_ids)
        future.add_done_callback(lambda _future: self._ended.put(submission_id))

    def busy(self) -> set[str]:
        """The batches in flight, alone or in a submission."""
        return set(self.in_flight).union(*self._carried.values())

    def wait_ended(self, timeout: float) -> list[Ended]:
        """The batches that ended, waiting up to `timeout` seconds for the first."""
        try:
            ended = [self._ended.get(timeout=timeout)]
        except queue.Empty:
            return []
        while not self._ended.empty():
            ended.append(self._ended.get_nowait())
        outcomes: list[Ended] = []
        for key in ended:
            carried = self._carried.pop(key, (key,))
            outcome = _outcome_of(key, self.in_flight.pop(key))
            if isinstance(outcome, Crashed):  # each batch it carried is one that crashed
                outcomes += [Crashed(batch_id, outcome.error) for batch_id in carried]
            else:
                outcomes.append(outcome)
        return outcomes


_OUTCOMES = (Settled, StopsRun, HeldByBreaker, OverBudget, LedgerFailed, SubmissionEnded)


def _outcome_of(key: str, future: PrefectFuture[Any]) -> Ended:
    try:
        result = future.result(raise_on_failure=False)
    except BaseException as exc:  # the run itself broke (crashed, cancelled from outside)
        return Crashed(key, _said(exc))
    if isinstance(result, _OUTCOMES):
        return result
    if isinstance(result, BaseException):
        return Crashed(key, _said(result))
    return Crashed(key, f"its task run ended without an outcome: {result!r}")


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
