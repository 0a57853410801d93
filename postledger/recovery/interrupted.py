"""Finishing what an earlier run left, from what it saved.

R20: facts spilled while the ledger could not be written are imported first.
R21: a batch whose output is saved (`received`) is validated and finished locally.
R22-R26: a batch sent but never answered is planned (`steps.py`: poll its task, or resubmit
it) and only done once a person said yes; one whose task id was never saved is first looked
for upstream (`adopt_orphans`).
"""

from __future__ import annotations

from typing import Protocol

from postledger.batches.output import check_output
from postledger.failures.policy import Decision, Limits, after_output
from postledger.guards.spend import Price
from postledger.guards.spill import Spill
from postledger.ledger import Ledger
from postledger.record.models import BatchStatus


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


class FindsTasks(Protocol):
    async def find_task(self, *, batch_id: str, idempotency_key: str) -> str | None: ...

    async def find_job(self, *, submission_id: str, idempotency_key: str) -> str | None: ...


async def adopt_orphans(ledger: Ledger, month: str, upstream: FindsTasks) -> list[str]:
    """Before anyone is asked to resubmit a batch whose task id was never saved (R24, R49): look
    for the upstream task made under its key (listing never pays). One found is adopted — its
    id saved, an event logged — so recovery polls it (R23) instead of paying again. Returns
    the batches adopted. A submission's job (many batches) is looked for once, by the
    submission's metadata, and adopted by every batch it carried."""
    adopted = []
    for submission in ledger.orphaned_submissions(month):
        job_id = await upstream.find_job(
            submission_id=submission.submission_id, idempotency_key=submission.idempotency_key
        )
        if job_id is not None:
            adopted += ledger.record_job_id(
                submission.submission_id,
                job_id,
                adopted=f"adopted upstream job {job_id}: made for submission "
                f"{submission.submission_id} by an interrupted run that never saved its id "
                "(found by its metadata); it is polled, not paid again",
            )
    for batch in ledger.batches(month, BatchStatus.RUNNING):
        if batch.upstream_task_id or batch.raw_output is not None or not batch.sends:
            continue
        if batch.submission_id is not None:  # its submission was looked for above
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
