"""Where a person's answer goes (`postledger approve`): which question of the month waits, whether
the answer fits it, and what it then records.

A plain decision over what the caller read of the ledger, one type per outcome: reading the
ledger and writing the answer stay with the caller (the ledger's façade sits above this layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from postledger.record.kinds import Answer, BreakerLevel, Question

if TYPE_CHECKING:
    from postledger.record.models import ApprovalRecord


@dataclass(frozen=True)
class Said:
    """What a person answered: --poll and --resubmit say yes to interrupted batches, --stop says
    no to whatever waits, and none of them says continue. A no and a yes at once is no answer
    (`read_answer` gives `StopWithYes` for it)."""

    poll: bool = False
    resubmit: bool = False
    stop: bool = False

    def __post_init__(self) -> None:
        if self.stop and self.yes_to_batches:
            raise ValueError("--stop cannot go with --poll or --resubmit")

    @property
    def yes_to_batches(self) -> bool:
        return self.poll or self.resubmit

    @property
    def decision(self) -> Answer:
        """The answer to an open breaker or a budget: go on, or stop."""
        return Answer.STOP if self.stop else Answer.CONTINUE


@dataclass(frozen=True)
class StopWithYes:
    """--stop with --poll or --resubmit: refused before the ledger is even read."""


def read_answer(*, poll: bool, resubmit: bool, stop: bool) -> Said | StopWithYes:
    """The command line's flags as an answer, or `StopWithYes` when they contradict."""
    if stop and (poll or resubmit):
        return StopWithYes()
    return Said(poll=poll, resubmit=resubmit, stop=stop)


@dataclass(frozen=True)
class Found:
    """What the ledger holds for the month, read just before the answer is routed."""

    question: ApprovalRecord | None  # the month's open question, if a run asked one
    month_known: bool  # posts synced, or a question asked (a breaker trips for every month)
    breaker: BreakerLevel  # of the question's upstream, else of the configured one
    batches_need_yes: bool  # interrupted batches wait for a yes to poll or send again


@dataclass(frozen=True)
class UnknownMonth:
    """No question waits, and the ledger knows nothing of the month."""


@dataclass(frozen=True)
class NotThisQuestion:
    """Refused: what was said is not an answer to the question that waits (`asked`)."""

    asked: Question
    said: Said


@dataclass(frozen=True)
class NoBatchNeedsAYes:
    """Refused: a yes to interrupted batches when none needs one, while the breaker is open; it
    must not be taken for a yes to the breaker."""


@dataclass(frozen=True)
class NothingWaits:
    """No run is paused, the breaker is not open, and the answer is no yes that batches need."""

    breaker: BreakerLevel
    batches_need_yes: bool


@dataclass(frozen=True)
class AnswerRecovery:
    """Record the yes (or no) to interrupted batches: to the open question, or with none, for
    the next run."""

    poll: bool
    resubmit: bool


@dataclass(frozen=True)
class AnswerBudget:
    """Close the budget's question with go on or stop."""

    question_id: int
    answer: Answer


@dataclass(frozen=True)
class AnswerBreaker:
    """Answer the open breaker: continue sends it to probe, stop leaves it open."""

    answer: Answer


Route = (
    UnknownMonth
    | NotThisQuestion
    | NoBatchNeedsAYes
    | NothingWaits
    | AnswerRecovery
    | AnswerBudget
    | AnswerBreaker
)


def route_answer(said: Said, found: Found) -> Route:
    """Where `said` goes, given what waits. An answer that fits no waiting question is refused
    (nothing is recorded); an answer with no question waiting counts for the next run."""
    question = found.question
    if question is None:
        return _with_no_question(said, found)
    if not fits(question.kind, said):
        return NotThisQuestion(question.kind, said)
    if question.kind is Question.RECOVERY:
        return AnswerRecovery(poll=said.poll, resubmit=said.resubmit)
    if question.kind is Question.BUDGET and question.id is not None:
        return AnswerBudget(question.id, said.decision)
    return AnswerBreaker(said.decision)


def fits(kind: Question, said: Said) -> bool:
    """Whether `said` answers a question of `kind`: --poll and --resubmit answer interrupted
    batches only; a plain approve answers the breaker or the budget only; --stop refuses any
    of them."""
    if said.yes_to_batches:
        return kind is Question.RECOVERY
    return said.stop or kind is not Question.RECOVERY


def _with_no_question(said: Said, found: Found) -> Route:
    """No run is paused: a yes goes to interrupted batches that need one, anything else to an
    open breaker."""
    if not found.month_known:
        return UnknownMonth()
    if said.yes_to_batches and found.batches_need_yes:
        return AnswerRecovery(poll=said.poll, resubmit=said.resubmit)
    if found.breaker is not BreakerLevel.OPEN:
        return NothingWaits(found.breaker, found.batches_need_yes)
    if said.yes_to_batches:
        return NoBatchNeedsAYes()
    return AnswerBreaker(said.decision)
