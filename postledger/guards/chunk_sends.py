"""A chunk of a submission's batches marked running, and a chunk of its lines' outputs saved,
each in the caller's one write transaction (`Ledger.mark_running_many`, `save_outputs`).

Why: on a Batch API one upstream job carries thousands of ledger batches; marked and saved
one batch per transaction, with an ORM load of its posts and an ORM record per charge, that
bookkeeping cost more than the rest of the month. The rules are those of one batch
(`Ledger.mark_running`, `save_output`): the breaker and the budget asked before each batch,
the intent to pay and the possible charge booked before the call (R3, R51, R52), the output
kept before it is checked (R4); the posts are read by one query and moved by one statement
per chunk (`record.batch_chunks`, `Transitions.posts_with_values`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sqlmodel import Session

from postledger.defaults import PriceBook
from postledger.guards.breaker import BreakerHeld
from postledger.guards.breaker_state import breaker_for_update, breaker_holds
from postledger.guards.charges import (
    NO_QUOTE,
    BudgetHeld,
    budget_holds,
    quote,
    send_counted,
    settle_all,
    write_spend,
)
from postledger.guards.estimates import Pricing
from postledger.record import batch_chunks
from postledger.record.models import BatchRecord, BatchStatus, Charge, PostRecord, PostStatus
from postledger.record.reads import load_batches
from postledger.record.states import Transitions


class JobRoom(Protocol):
    """What an upstream job has room for, asked before each batch is marked for it."""

    def fits(self) -> bool:
        """Whether the job takes one more batch."""

    def took(self, batch: BatchRecord) -> None:
        """The batch, marked running, is in the job (its request kept)."""


def mark(
    session: Session,
    moves: Transitions,
    batch_ids: Sequence[str],
    upstream: str | None,
    *,
    idempotent: bool,
    pricing: Pricing | None,
    max_cost: int | None,
    holder: str | None,
    max_attempts: int | None,
    room: JobRoom | None,
) -> tuple[list[BatchRecord], BreakerHeld | BudgetHeld | None]:
    """The batches marked running in order until one may not start (why is returned) or the
    job has no `room` for it. The caller holds the month's lock, and the breakers' lock when
    an `upstream` is named."""
    month = moves.month
    started: list[BatchRecord] = []
    rows: list[dict[str, Any]] = []  # the posts of new attempts
    again: list[dict[str, Any]] = []  # the posts sent again under their key (R35)
    spend: list[dict[str, Any]] = []  # the possible charges booked, written together
    held: BreakerHeld | BudgetHeld | None = None
    batches = load_batches(session, batch_ids)
    members = batch_chunks.members(session, month, batches)
    # Held here, so that each check finds the breaker in the session instead of reading it.
    _breaker = breaker_for_update(session, upstream) if upstream is not None else None
    for batch in batches:
        if room is not None and not room.fits():
            break
        if upstream is not None and (held := breaker_holds(session, upstream, batch)):
            break
        # A new attempt, unless sent again under its key to an upstream that honours it (R35).
        first = batch.charge is Charge.NONE or not idempotent
        queued = [m for m in members[batch.batch_id] if m.status is PostStatus.QUEUED]
        quoted = quote(pricing, batch_chunks.texts_to_send(batch, queued)) if first else NO_QUOTE
        if first and max_cost is not None:
            write_spend(session, spend)  # the budget counts every send booked so far
            if held := budget_holds(session, month, quoted.estimated, max_cost):
                break
        batch_chunks.start(moves, batch, queued, upstream=upstream, holder=holder)
        if first and max_attempts is not None:
            batch_chunks.check_caps(batch, queued, max_attempts)
        if (booked := send_counted(batch, first=first, quoted=quoted)) is not None:
            spend.append(booked)
        (rows if first else again).extend(batch_chunks.attempts_counted(batch, queued, first=first))
        started.append(batch)
        if room is not None:
            room.took(batch)
    write_spend(session, spend)
    attempt = {"attempts": PostRecord.attempts + 1}  # a new attempt, counted (R16, R38)
    moves.posts_with_values(PostStatus.QUEUED, PostStatus.RUNNING, rows, same=attempt)
    moves.posts_with_values(PostStatus.QUEUED, PostStatus.RUNNING, again)
    return started, held


def save(
    session: Session,
    moves: Transitions,
    outputs: Sequence[tuple[str, str, dict[str, Any] | None]],
    prices: PriceBook | None,
) -> None:
    """Each batch's raw output and usage kept (batch id, output, usage), its charge settled
    from the usage (R51), the batch and its running posts `received`."""
    why = "output saved, not yet validated"
    ids = [batch_id for batch_id, _, _ in outputs]
    batches = load_batches(session, ids, unread=("request", "raw_output"))
    members = batch_chunks.members(session, moves.month, batches, texts=False)
    settle_all(session, [(batch_id, usage) for batch_id, _, usage in outputs], prices)
    rows: list[dict[str, Any]] = []
    for batch, (_, raw, usage) in zip(batches, outputs, strict=True):
        batch.raw_output, batch.usage = raw, usage
        moves.batch(batch, BatchStatus.RECEIVED, why)
        running = members[batch.batch_id]
        rows += [{"pid": m.post_id, "why": why} for m in running if m.status is PostStatus.RUNNING]
    moves.posts_with_values(PostStatus.RUNNING, PostStatus.RECEIVED, rows)
