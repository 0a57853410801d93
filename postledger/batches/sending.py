"""One batch's life in the ledger, from the send to the saved output, in the month's write
transaction: what is marked before the paid call (R3) and what is kept after it (R4, R23)."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from postledger.defaults import PriceBook
from postledger.guards.charges import settle
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    Charge,
    EntityKind,
    PostRecord,
    PostStatus,
)
from postledger.record.reads import LedgerError, posts_in
from postledger.record.states import Transitions


def queued_posts(session: Session, batch: BatchRecord) -> list[PostRecord]:
    """The posts a send of the batch starts: those still queued in it."""
    return posts_in(session, batch, PostStatus.QUEUED)


def start(
    moves: Transitions,
    batch: BatchRecord,
    posts: list[PostRecord],
    *,
    upstream: str | None,
    holder: str | None,
) -> list[PostRecord]:
    """The batch `running` and its request kept (R35); returns its `posts` (those
    `queued_posts` gave), still `queued`."""
    moves.batch(batch, BatchStatus.RUNNING, "about to call the upstream")
    batch.upstream, batch.sent_by = upstream, holder
    if not posts:
        raise LedgerError(f"batch {batch.batch_id} has no post left to send")
    if batch.request is None:
        if len(posts) != len(batch.post_ids):
            raise LedgerError(
                f"batch {batch.batch_id} lists {len(batch.post_ids)} posts but only "
                f"{len(posts)} are queued in it: the ledger changed under this run"
            )
        # What is sent is kept: a send again under the same key must be the same request,
        # even if some posts changed since (they have left the batch, R25).
        batch.request = [[p.post_id, p.text] for p in posts]
    return posts


def count_attempts(
    moves: Transitions, batch: BatchRecord, posts: list[PostRecord], *, first: bool
) -> None:
    """The posts `running`, each with its business attempt counted when the send is a new
    attempt (R16, R38)."""
    for post in posts:
        post.attempts += 1 if first else 0
        moves.post(
            post,
            PostStatus.RUNNING,
            f"{batch.batch_id} sent (attempt {post.attempts}"
            + ("" if first else f", same key, send {batch.sends}")
            + ")",
        )


def take_task_id(
    session: Session, moves: Transitions, batch: BatchRecord, task_id: str, adopted: str | None
) -> None:
    """The upstream task id kept, for recovery to poll (R23): the task was made, so charged.
    An `adopted` id (found upstream later, R49) needs a batch left running without one."""
    if adopted is not None:
        if batch.upstream_task_id is not None or batch.status is not BatchStatus.RUNNING:
            raise LedgerError(f"batch {batch.batch_id} has no orphaned upstream task to adopt")
        moves.noted(EntityKind.BATCH, batch.batch_id, batch.status, adopted)
    batch.upstream_task_id = task_id
    batch.charge = Charge.CONFIRMED
    session.add(batch)


def receive(
    session: Session,
    moves: Transitions,
    batch: BatchRecord,
    raw: str,
    usage: dict[str, Any] | None,
    prices: PriceBook | None,
    why: str,
) -> None:
    """The raw output kept before it is checked (R4), and its charge settled from the usage
    (R51); the batch and its running posts `received`."""
    batch.raw_output, batch.usage = raw, usage
    settle(session, batch.batch_id, usage, prices)
    moves.batch(batch, BatchStatus.RECEIVED, why)
    for post in posts_in(session, batch, PostStatus.RUNNING):
        moves.post(post, PostStatus.RECEIVED, why)
