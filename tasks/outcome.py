"""The Prefect state that shows a trip's outcome (`postledger.trip.outcome`) in the UI: a
`process-batch` task run's, and a `process-submission` task run's."""

from __future__ import annotations

from collections import Counter
from typing import Any

from prefect.client.schemas.objects import State
from prefect.states import Cancelled, Completed, Failed

from postledger.ledger import BatchStatus, FailureKind
from postledger.trip import (
    BatchOutcome,
    HeldByBreaker,
    LedgerFailed,
    OverBudget,
    Settled,
    StopsRun,
    SubmissionEnded,
)

__all__ = ["final_state", "submission_state"]


def final_state(outcome: BatchOutcome) -> State[Any]:
    """The task run's final state: Completed when the batch's output was checked and saved,
    Failed when the batch failed or its outcome is not known yet, Cancelled when it was not
    started. The outcome rides along as the state's data, for the flow."""
    match outcome:
        case Settled(status=BatchStatus.COMPLETED):
            return Completed(message=outcome.summary, data=outcome)
        case Settled(status=BatchStatus.RUNNING) | StopsRun(status=BatchStatus.RUNNING):
            return Failed(
                name="Uncertain",
                message=f"sent, and no verdict from the upstream yet: {outcome.summary}. "
                "Nothing is lost or sent again by itself",
                data=outcome,
            )
        case Settled() | StopsRun():
            return Failed(message=f"{_kind(outcome.kind)}: {outcome.summary}", data=outcome)
        case HeldByBreaker() | OverBudget():
            return Cancelled(name="NotStarted", message=outcome.why, data=outcome)
        case LedgerFailed():
            return Failed(
                name="LedgerFailed",
                message=f"the ledger could not be written ({outcome.error}); the batch is "
                f"{outcome.status.value}, what it paid for is in the spill file",
                data=outcome,
            )


def _kind(kind: FailureKind | None) -> str:
    return kind.value if kind is not None else "no output"


def submission_state(ended: SubmissionEnded) -> State[Any]:
    """Completed when every batch it sent ended completed; Failed when one did not, or one
    could not be started; Cancelled when none could. The counts are the state's message."""
    statuses = Counter(_word(outcome) for outcome in ended.outcomes)
    said = ", ".join(f"{n} {word}" for word, n in sorted(statuses.items()))
    if ended.not_started is not None:
        why = f"not started: {_why(ended.not_started)}"
        said = f"{said}; {why}" if said else why
    message = f"{len(ended.outcomes)} of {len(ended.batch_ids)} batches sent: {said}"
    if not ended.outcomes:
        return Cancelled(name="NotStarted", message=message, data=ended)
    if ended.not_started is None and set(statuses) == {"completed"}:
        return Completed(message=message, data=ended)
    return Failed(message=message, data=ended)


def _why(outcome: BatchOutcome) -> str:
    match outcome:
        case HeldByBreaker(why=why) | OverBudget(why=why):
            return why
        case StopsRun(what_to_do=what_to_do):
            return what_to_do
        case LedgerFailed(error=error):
            return f"the ledger could not be written: {error}"
        case Settled(summary=summary):
            return summary


def _word(outcome: BatchOutcome) -> str:
    match outcome:
        case Settled(status=BatchStatus.RUNNING) | StopsRun(status=BatchStatus.RUNNING):
            return "uncertain"
        case Settled(status=status) | StopsRun(status=status) | LedgerFailed(status=status):
            return status.value
        case HeldByBreaker() | OverBudget():
            return "not started"
