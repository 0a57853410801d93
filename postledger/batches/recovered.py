"""What recovery writes, in the month's write transaction: facts spilled while the ledger
could not be written (R20, R46), a batch a person said may be sent again (R24), and batches
whose posts all changed since they were sent (R50)."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from postledger.batches.sending import receive, take_task_id
from postledger.defaults import PriceBook
from postledger.guards.charges import Quote, book_gateway_retries, settle
from postledger.guards.spill import SpillKind
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    FailureKind,
    PostStatus,
    SpillImportRecord,
)
from postledger.record.reads import load_batch, posts_in
from postledger.record.states import Transitions


def take_spilled(
    session: Session, moves: Transitions, record: dict[str, Any], prices: PriceBook | None
) -> int:
    """One spill record taken in, once (by its id), and only what the ledger does not know
    already. Returns 1 if it was taken in, else 0."""
    record_id = record.get("id")
    if record_id is not None:
        if session.get(SpillImportRecord, record_id) is not None:
            return 0
        batch_id, spilled = record["batch_id"], str(record["kind"])
        session.add(SpillImportRecord(record_id=record_id, batch_id=batch_id, kind=spilled))
    batch = load_batch(session, record["batch_id"])
    kind = SpillKind(record["kind"])
    task_id = record.get("task_id")
    taken = 0
    if task_id and batch.upstream_task_id is None:
        take_task_id(session, moves, batch, task_id, None)
        taken += kind is SpillKind.TASK_ID
    if kind is SpillKind.REQUEST_RETRY:
        batch.request_retries += 1
        session.add(batch)
        taken += 1
    if kind is SpillKind.USAGE and batch.status is BatchStatus.RUNNING:
        settle(session, batch.batch_id, record["usage"], prices)  # the decision comes later
        taken += 1
    if kind in (SpillKind.GATEWAY_RETRIES, SpillKind.TASK_ID) and record.get("retries"):
        # On a task id: what the gateway did with the create that made it, kept with it.
        retries, quoted = int(record["retries"]), Quote(record.get("estimated_cost"))
        book_gateway_retries(session, moves, batch, retries, quoted=quoted)
        taken += kind is SpillKind.GATEWAY_RETRIES
    if kind is SpillKind.OUTPUT and batch.status is BatchStatus.RUNNING:
        why = "output saved from the spill file, not yet validated"
        receive(session, moves, batch, record["output"], record.get("usage"), prices, why)
        taken += 1
    return taken


def resend_later(
    session: Session, moves: Transitions, batch: BatchRecord, why: str, max_attempts: int | None
) -> None:
    """The batch back to `queued`, with its same idempotency key and request; a post with no
    paid attempt left gets one more: the person said yes to this one (R38)."""
    moves.batch(batch, BatchStatus.QUEUED, why)
    for post in posts_in(session, batch, PostStatus.RUNNING):
        if max_attempts is not None and post.attempts >= max_attempts + post.extra_attempts:
            post.extra_attempts += 1
        moves.post(post, PostStatus.QUEUED, why)


def close_emptied(session: Session, moves: Transitions, month: str) -> list[str]:
    """The month's batches sent before whose posts all changed since, failed: nothing of them
    is reused, nothing is sent again under their key. Returns their ids."""
    closed = []
    candidates = session.exec(
        select(BatchRecord).where(
            BatchRecord.month == month,
            col(BatchRecord.status).in_([BatchStatus.QUEUED, BatchStatus.RUNNING]),
            BatchRecord.sends > 0,
        )
    ).all()
    for batch in candidates:
        if not posts_in(session, batch):
            why = "every post of it changed since it was sent: it is not sent again"
            moves.batch(batch, BatchStatus.FAILED, why, failure=FailureKind.INPUT_CHANGED)
            closed.append(batch.batch_id)
    return closed
