"""What one `process-batch` task run tells the flow: one type per outcome, and the Prefect
state that shows it in the UI.

The ledger already holds what became of the batch; an outcome only says what the flow must do
next: go on, hold new starts (the breaker, the budget), or start nothing more in this run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from prefect.client.schemas.objects import State
from prefect.states import Cancelled, Completed, Failed

from postledger.failures.policy import Decision
from postledger.record.models import BatchStatus, FailureKind, PostStatus


@dataclass(frozen=True)
class Settled:
    """The batch went through its upstream calls; the ledger says what became of each post."""

    batch_id: str
    status: BatchStatus
    summary: str  # "25 completed", "24 completed, 1 retried", or the failure's reason
    kind: FailureKind | None = None


@dataclass(frozen=True)
class StopsRun:
    """The batch ended on something a person must fix (a key, the balance, a permission, the
    configuration, or the month taken over by another run): nothing more starts in this run."""

    batch_id: str
    status: BatchStatus
    summary: str
    what_to_do: str
    kind: FailureKind | None = None


@dataclass(frozen=True)
class HeldByBreaker:
    """Not started, nothing paid: another run's probe batch has the upstream's only slot."""

    batch_id: str
    why: str


@dataclass(frozen=True)
class OverBudget:
    """Not started, nothing paid: its possible cost could cross the month's budget."""

    batch_id: str
    why: str


@dataclass(frozen=True)
class LedgerFailed:
    """A ledger write failed on the way: no new batch may start in this run. What the batch
    paid for is in the spill file, for the next run to import."""

    batch_id: str
    status: BatchStatus
    error: str


BatchOutcome = Settled | StopsRun | HeldByBreaker | OverBudget | LedgerFailed


def outcome_of(batch_id: str, decision: Decision, ledger_failure: str | None) -> BatchOutcome:
    """The outcome of a batch whose decision the ledger has applied."""
    summary = summary_of(decision)
    if ledger_failure is not None:
        return LedgerFailed(batch_id, decision.batch_to, ledger_failure)
    if decision.stop_run is not None:
        return StopsRun(batch_id, decision.batch_to, summary, decision.stop_run, decision.kind)
    return Settled(batch_id, decision.batch_to, summary, decision.kind)


_MOVED = {
    PostStatus.COMPLETED: "completed",
    PostStatus.PENDING: "retried",
    PostStatus.WAITING: "waiting",
    PostStatus.FAILED: "failed",
}


def summary_of(decision: Decision) -> str:
    """A batch's result in a few words: "24 completed, 1 retried" once its output was
    checked, the failure's reason otherwise."""
    if decision.batch_to is not BatchStatus.COMPLETED:
        return decision.why
    counts = Counter(move.to for move in decision.moves)
    return (
        ", ".join(f"{counts[status]} {word}" for status, word in _MOVED.items() if counts[status])
        or decision.why
    )


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
                message=f"sent, outcome not known yet ({_kind(outcome.kind)}): "
                f"{outcome.summary}. Nothing is lost or sent again by itself",
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


@dataclass(frozen=True, repr=False)
class SubmissionEnded:
    """What one `process-submission` task run tells the flow: each batch's outcome, and the
    batch that could not be started (held by the breaker or the budget, or a stop), if one
    was; the batches after it were left queued too."""

    submission_id: str
    batch_ids: tuple[str, ...]  # every batch it was given
    outcomes: tuple[BatchOutcome, ...]  # of the batches it sent, in order
    not_started: BatchOutcome | None = None

    def __repr__(self) -> str:
        # Prefect logs a failed state with its data: thousands of outcomes would flood it.
        return f"SubmissionEnded({self.submission_id!r}, {len(self.batch_ids)} batches)"


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
