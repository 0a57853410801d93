"""What the next run would do with a month's interrupted batches (R21-R26): one step per batch
sent by an earlier run and not finished, and what a person is asked before any is sent again.

`plan_recovery` is a plain function of the records; `recovery_plan` reads them in plain SQL,
so `postledger plan` shows, without the ORM and without a call, exactly what a run would do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from postledger.guards.spend import Price, estimate, money, tokens_of
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

    def of(self, action: RecoveryAction) -> list[RecoveryStep]:
        return [step for step in self.steps if step.action is action]

    @property
    def needs_yes(self) -> bool:
        return bool(self.of(RecoveryAction.POLL) or self.of(RecoveryAction.RESUBMIT))

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


def plan_recovery(
    batches: Sequence[InterruptedBatch],
    *,
    idempotent: bool,
    price: Price | None = None,
    prompt: str = "",
) -> RecoveryPlan:
    """One step per interrupted batch (sent by an earlier run, not finished). A plain function
    of the records: `postledger plan` shows exactly what a run would do."""
    steps = []
    for batch in sorted(batches, key=lambda b: b.seq):
        if batch.status not in (BatchStatus.RUNNING, BatchStatus.RECEIVED):
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
        cost = estimate(price, prompt, texts) if price is not None and texts else 0
        steps.append(RecoveryStep(batch.batch_id, action, post_ids, chars, why, cost))
    return RecoveryPlan(steps, idempotent)


def recovery_plan(reader: Reader, month: str, settings: Settings) -> RecoveryPlan:
    """The plan for the month's interrupted batches, as the configured upstream would see it."""
    return plan_recovery(
        rows.interrupted(reader, month),
        idempotent=settings.honours_keys(),
        price=settings.price(),
        prompt=settings.prompt,
    )
