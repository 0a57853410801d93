"""What one batch's trip (or one submission's) tells whoever runs it: one type per outcome.

The ledger already holds what became of the batch; an outcome only says what the run must do
next: go on, hold new starts (the breaker, the budget), or start nothing more in this run.
The Prefect shell shows an outcome as its task run's final state (`tasks/outcome.py`), and its
loop takes the same outcome back (`Ended`): one family from the trip to the loop.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from postledger.failures.policy import Decision
from postledger.record.kinds import BatchStatus, FailureKind, PostStatus


@dataclass(frozen=True)
class Settled:
    """The batch went through its upstream calls; the ledger says what became of each post.
    `status` running means uncertain: sent, and no verdict yet (it waits for the next look)."""

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


@dataclass(frozen=True, repr=False)
class SubmissionEnded:
    """What one submission's trip tells: each batch's outcome, and the batch that could not
    be started (held by the breaker or the budget, or a stop), if one was; the batches after
    it were left queued too."""

    submission_id: str
    batch_ids: tuple[str, ...]  # every batch it was given
    outcomes: tuple[BatchOutcome, ...]  # of the batches it sent, in order
    not_started: BatchOutcome | None = None

    def __repr__(self) -> str:
        # Prefect logs a failed state with its data: thousands of outcomes would flood it.
        return f"SubmissionEnded({self.submission_id!r}, {len(self.batch_ids)} batches)"


@dataclass(frozen=True)
class Crashed:
    """The batch's run broke without an outcome (a bug, or its run cancelled from outside;
    `error` says which). One broken batch must not stop the others (R17); it is not started
    again in this run, and the ledger still holds where it got to."""

    batch_id: str
    error: str


# Everything a run's loop takes back from a trip it started.
Ended = BatchOutcome | SubmissionEnded | Crashed


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
