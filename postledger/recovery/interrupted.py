"""Finishing what an earlier run left, from what it saved.

R20: facts spilled while the ledger could not be written are imported first.
R21: a batch whose output is saved (`received`) is validated and finished locally.
R22-R26: a batch sent but never answered is planned — poll its task, or resubmit it — and
only done once a person said yes; `plan_recovery` is a plain function over the records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from postledger.batches.output import check_output
from postledger.failures.policy import Decision, Limits, after_output
from postledger.guards.spend import Price, estimate, money, tokens_of
from postledger.guards.spill import Spill
from postledger.ledger import Ledger
from postledger.record.models import BatchRecord, BatchStatus, PostRecord
from postledger.record.reads import LedgerReads
from postledger.settings import Settings


def finish_from_output(
    ledger: Ledger, batch_id: str, limits: Limits, upstream: str | None
) -> Decision:
    """Check a batch's saved output and apply what follows (R12, R13). With `upstream`, the
    delivery also counts as a success for its breaker."""
    batch = ledger.batch(batch_id)
    if batch.raw_output is None:
        raise ValueError(f"batch {batch_id} has no saved output to finish from")
    check = check_output(batch.raw_output, batch.post_ids)
    decision = after_output(batch, ledger.posts_of(batch_id), check, limits)
    ledger.apply(batch_id, decision, check, upstream=upstream)
    return decision


def finish_saved_outputs(ledger: Ledger, month: str, limits: Limits) -> list[str]:
    """R21: every `received` batch of the month, finished from its saved output. These
    deliveries are old news, so they do not move any breaker. Returns the batch ids."""
    finished = []
    for batch in ledger.batches(month, BatchStatus.RECEIVED):
        finish_from_output(ledger, batch.batch_id, limits, upstream=None)
        finished.append(batch.batch_id)
    return finished


def import_spill(ledger: Ledger, spill: Spill, price: Price | None = None) -> int:
    """R20: take in the month's spill file, then move it aside, under the file's lock (a batch
    of another run may be appending to it). Returns the records taken in."""
    taken = spill.take(lambda records: ledger.import_spill(records, price))
    return taken or 0


# --- batches interrupted without a saved output (R22-R26) -----------------------------------


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
    batches: Sequence[BatchRecord],
    posts_of: Mapping[str, Sequence[PostRecord]],
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
        posts = posts_of.get(batch.batch_id, [])
        post_ids = [p.post_id for p in posts]
        chars = sum(len(text) for _, text in batch.request or [])
        if not posts:
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


class FindsTasks(Protocol):
    async def find_task(self, *, batch_id: str, idempotency_key: str) -> str | None: ...


async def adopt_orphans(ledger: Ledger, month: str, upstream: FindsTasks) -> list[str]:
    """Before anyone is asked to resubmit a batch whose task id was never saved (R24, R49): look
    for the upstream task made under its key (listing never pays). One found is adopted — its
    id saved, an event logged — so recovery polls it (R23) instead of paying again. Returns
    the batches adopted."""
    adopted = []
    for batch in ledger.batches(month, BatchStatus.RUNNING):
        if batch.upstream_task_id or batch.raw_output is not None or not batch.sends:
            continue
        task_id = await upstream.find_task(
            batch_id=batch.batch_id, idempotency_key=batch.idempotency_key
        )
        if task_id is not None:
            ledger.record_task_id(
                batch.batch_id,
                task_id,
                adopted=f"adopted upstream task {task_id}: made for this batch and key by an "
                "interrupted run that never saved its id (found by its metadata); it is "
                "polled, not paid again",
            )
            adopted.append(batch.batch_id)
    return adopted


def recovery_plan(ledger: LedgerReads, month: str, settings: Settings) -> RecoveryPlan:
    """The plan for the month's interrupted batches, as the configured upstream would see it."""
    batches = ledger.batches(month, BatchStatus.RUNNING, BatchStatus.RECEIVED)
    return plan_recovery(
        batches,
        {b.batch_id: ledger.posts_of(b.batch_id) for b in batches},
        idempotent=settings.honours_keys(),
        price=settings.price(),
        prompt=settings.prompt,
    )
