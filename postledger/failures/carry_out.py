"""A business decision (`postledger.failures.policy`) carried out on a batch and its posts,
in the month's write transaction: the policy decides, this moves the records."""

from __future__ import annotations

from sqlmodel import Session

from postledger.batches.output import OutputCheck
from postledger.batches.planning import new_batches
from postledger.failures.policy import Decision
from postledger.guards.charges import account
from postledger.record.models import BatchRecord, Charge, EntityKind, PostStatus
from postledger.record.reads import LedgerError, posts_in
from postledger.record.states import Transitions


def carry_out(
    session: Session,
    moves: Transitions,
    batch: BatchRecord,
    decision: Decision,
    check: OutputCheck | None,
) -> None:
    """Every post of the batch moved as decided (successes saved first, R13), halves planned
    (R12, R40), the charges accounted for (R51), and the batch moved last. An uncertain
    outcome moves nothing (R48)."""
    if decision.uncertain:
        # Nothing is final: the batch and its posts stay running for recovery. No run handles
        # it any more, so it holds no probe (R43).
        batch.sent_by = None
        session.add(batch)
        why = f"outcome unknown: {decision.why}"
        moves.noted(EntityKind.BATCH, batch.batch_id, batch.status, why)
        return
    posts = {
        p.post_id: p for p in posts_in(session, batch, PostStatus.RUNNING, PostStatus.RECEIVED)
    }
    for move in decision.moves:
        post = posts.pop(move.post_id)
        if move.to is PostStatus.COMPLETED:
            assert check is not None, "a completed post needs the checked output"
            post.result = check.valid[move.post_id]
        if move.refund:
            post.attempts -= 1
        if move.requeue:
            post.requeues += 1
        if move.to in (PostStatus.PENDING, PostStatus.WAITING):
            post.batch_id = None
        moves.post(post, move.to, move.why, failure=move.kind)
        post.not_before = move.not_before
    if decision.halves:
        halves = [[posts.pop(pid) for pid in half] for half in decision.halves]
        by_id = {p.post_id: p for half in halves for p in half}
        for post in by_id.values():
            post.split = True  # one split per lineage, whatever batch it goes into
        for half in new_batches(
            session, moves, batch.month, decision.halves, split_from=batch.batch_id
        ):
            for post_id in half.post_ids:
                by_id[post_id].batch_id = half.batch_id
                moves.post(by_id[post_id], PostStatus.QUEUED, f"planned in {half.batch_id}")
    if posts:
        raise LedgerError(
            f"the decision for {batch.batch_id} left posts without a move: {sorted(posts)}"
        )
    if decision.nothing_charged and batch.sends <= 1:
        batch.charge = Charge.NONE  # no earlier send of it may have been charged either
    account(session, batch, nothing_charged=decision.nothing_charged, kind=decision.kind)
    moves.batch(batch, decision.batch_to, decision.why, failure=decision.kind)
    batch.not_before = decision.batch_not_before
