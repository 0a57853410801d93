"""What the next run would do with a month's interrupted batches (R21-R26): one step per batch
sent by an earlier run and not finished, and what a person is asked before any is sent again.

`plan_recovery` is a plain function of the records; `recovery_plan` reads them in plain SQL,
so `postledger plan` shows, without the ORM and without a call, exactly what a run would do.
A batch the live run of the month has in flight is not interrupted: it is in no step, nobody
is asked about it, and no answer covers it. An answer covers the batches it was shown as they
were then (`coverage`, R44): one changed since is asked about again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from postledger.analysis import AnalysisError, load_analysis
from postledger.defaults import Price
from postledger.guards.estimates import ASSUMED, EstimateRates, estimate, learned_rates, tokens_of
from postledger.guards.spend import money
from postledger.record import rows
from postledger.record.kinds import BatchStatus
from postledger.record.plain import Reader
from postledger.record.rows import InterruptedBatch

if TYPE_CHECKING:
    from postledger.settings import Settings


class RecoveryAction(StrEnum):
    FINISH_LOCALLY = "finish_locally"  # output saved: validate it, no AI call (R21)
    POLL = "poll"  # the task id is saved: poll that task, once a person said continue (R23)
    RESUBMIT = "resubmit"  # no task id: send again only if a person confirmed (R24)
    CLOSE = "close"  # every post changed since: nothing to recover (R25)


@dataclass(frozen=True)
class RecoveryStep:
    batch_id: str
    action: RecoveryAction
    post_ids: list[str]
    chars: int  # characters a resubmission sends again
    why: str
    estimated_cost: int = 0  # micro-units, what sending it again may cost (0: no price known)


@dataclass(frozen=True)
class RecoveryPlan:
    steps: list[RecoveryStep]
    idempotent: bool  # the upstream honours idempotency keys: a resubmission cannot pay twice
    # The month's last event number when the batches were read (None: not read from a ledger):
    # kept with an answer, it tells which batches changed after they were shown.
    as_of: int | None = None
    # Batches the live run of the month has in flight: not interrupted, not in any step.
    in_flight: list[str] = field(default_factory=list)

    def of(self, action: RecoveryAction) -> list[RecoveryStep]:
        return [step for step in self.steps if step.action is action]

    @property
    def needs_yes(self) -> bool:
        return bool(self.asked_about)

    @property
    def asked_about(self) -> list[str]:
        """The batches a person is asked about: those to poll or to send again."""
        return [s.batch_id for s in self.steps if s.action in _NEEDS_YES]

    @property
    def resubmit_tokens(self) -> int:
        """Estimated input tokens of the resubmissions: what a double charge could cost."""
        return tokens_of(sum(step.chars for step in self.of(RecoveryAction.RESUBMIT)))

    @property
    def double_charge_tokens(self) -> int:
        """The input tokens that may be paid twice if every resubmission is confirmed."""
        return 0 if self.idempotent else self.resubmit_tokens

    @property
    def double_charge_cost(self) -> int:
        """What may be paid twice (micro-units, estimated) if every resubmission is confirmed."""
        resends = self.of(RecoveryAction.RESUBMIT)
        return 0 if self.idempotent else sum(s.estimated_cost for s in resends)

    def summary(self) -> dict[str, Any]:
        return {
            "idempotent_upstream": self.idempotent,
            "groups": {
                action.value: {
                    "batches": [s.batch_id for s in self.of(action)],
                    "posts": sum(len(s.post_ids) for s in self.of(action)),
                }
                for action in RecoveryAction
            },
            "resubmit_input_tokens": self.resubmit_tokens,
            "possible_double_charge_input_tokens": self.double_charge_tokens,
            "possible_double_charge_cost": self.double_charge_cost,
            "possible_double_charge_shown": money(self.double_charge_cost),
            "in_flight": list(self.in_flight),
            "steps": [
                {
                    "batch_id": s.batch_id,
                    "action": s.action.value,
                    "posts": len(s.post_ids),
                    "why": s.why,
                }
                for s in self.steps
            ],
        }


_NEEDS_YES = (RecoveryAction.POLL, RecoveryAction.RESUBMIT)


def plan_recovery(
    batches: Sequence[InterruptedBatch],
    *,
    idempotent: bool,
    price: Price | None = None,
    prompt: str = "",
    rates: EstimateRates = ASSUMED,
    as_of: int | None = None,
) -> RecoveryPlan:
    """One step per interrupted batch (sent by an earlier run, not finished); the live run's
    batches in flight apart. A plain function of the records: `postledger plan` shows exactly
    what a run would do."""
    steps = []
    in_flight = []
    for batch in sorted(batches, key=lambda b: b.seq):
        if batch.status not in (BatchStatus.RUNNING, BatchStatus.RECEIVED):
            continue
        if batch.in_flight:
            in_flight.append(batch.batch_id)
            continue
        post_ids = batch.post_ids
        chars = sum(len(text) for _, text in batch.request or [])
        if not post_ids:
            action, why = RecoveryAction.CLOSE, "every post changed since it was sent"
        elif batch.raw_output is not None:
            action, why = RecoveryAction.FINISH_LOCALLY, "output saved: validated locally"
        elif batch.upstream_task_id:
            action = RecoveryAction.POLL
            why = f"task {batch.upstream_task_id} was made (and charged): poll it, no new task"
        else:
            action = RecoveryAction.RESUBMIT
            why = f"sent {batch.sends}x, no task id saved: the upstream may have made and " + (
                "charged it; the same idempotency key makes a resubmission safe"
                if idempotent
                else "charged it, and a resubmission may be charged twice"
            )
        texts = [text for _, text in batch.request or []]
        cost = estimate(price, prompt, texts, rates) if price is not None and texts else 0
        steps.append(RecoveryStep(batch.batch_id, action, post_ids, chars, why, cost))
    return RecoveryPlan(steps, idempotent, as_of, in_flight)


def recovery_plan(reader: Reader, month: str, settings: Settings) -> RecoveryPlan:
    """The plan for the month's interrupted batches, as the configured upstream would see it."""
    from postledger.upstreams import facts_of  # here: the plain readers load no HTTP client

    # The event number first: a batch that moves while it is read has a later event, and is
    # taken for changed (asked about again), never for unchanged.
    as_of = rows.last_event(reader, month)
    return plan_recovery(
        rows.interrupted(reader, month),
        idempotent=facts_of(settings).honours_keys,
        price=settings.price(),
        prompt=_asked(settings),
        rates=learned_rates(reader, settings.model),  # as a run would book a resubmission
        as_of=as_of,
    )


def _asked(settings: Settings) -> str:
    """What each resubmission carries besides its posts, for the estimate of what it may
    cost. An analysis that cannot be read is the run's to refuse, before anything is sent: it
    must not keep a person from answering a paused run, so the estimate then counts the
    built-in analysis's."""
    try:
        return settings.analysis_in_use().request_text
    except AnalysisError:
        return load_analysis(None).request_text


@dataclass(frozen=True)
class Coverage:
    """Which of a plan's batches that need a yes an answer covers (R44)."""

    covered: list[str]  # shown with the answer, and unchanged since
    not_covered: list[str]  # not shown with it, or changed after it was given

    @property
    def whole(self) -> bool:
        return not self.not_covered


def coverage(
    reader: Reader,
    month: str,
    plan: RecoveryPlan,
    batch_ids: Sequence[str] | None,
    shown_seq: int | None,
) -> Coverage:
    """What an answer given for `batch_ids`, shown as of event `shown_seq`, covers of `plan`: a
    batch it was shown that has no event of its own since. An answer that does not know when
    it was shown (`shown_seq` None) covers nothing."""
    asked = plan.asked_about
    if shown_seq is None:
        return Coverage([], asked)
    given = set(batch_ids or [])
    shown = [b for b in asked if b in given]
    changed = rows.changed_since(reader, month, shown_seq, shown)
    covered = [b for b in shown if b not in changed]
    return Coverage(covered, [b for b in asked if b not in covered])


def what_a_yes_covers(month: str, covered: Sequence[str], in_flight: Sequence[str] = ()) -> str:
    """What `postledger approve` says of the batches its answer covers (`covered`, shown now),
    and of those it does not because the live run has them in flight, in words."""
    one = len(covered) == 1
    said = (
        f"It covers {_listed(covered)} as {'it is' if one else 'they are'} now: a run asks "
        "again about any batch that changes before it uses this answer."
        if covered
        else "It covers no batch."
    )
    if in_flight:
        one = len(in_flight) == 1
        said += (
            f" {_listed(in_flight)} {'is' if one else 'are'} in flight with the run that holds "
            f"{month} now, and not covered: if {'it ends' if one else 'they end'} without an "
            "answer, a run asks about " + ("it." if one else "them.")
        )
    return said


def in_flight_words(month: str, in_flight: Sequence[str]) -> str:
    """Batches that are not interrupted because the live run has them in flight, in words."""
    one = len(in_flight) == 1
    return (
        f"{_listed(in_flight)} {'is' if one else 'are'} in flight with the run that holds "
        f"{month} now: not interrupted, nothing to answer for {'it' if one else 'them'} yet."
    )


def _listed(batch_ids: Sequence[str]) -> str:
    return ", ".join(batch_ids)
