"""A chunk of received batches finished from their saved outputs, in the caller's one write
transaction (`Ledger.finish_outputs`): what `recovery.interrupted.finish_from_output` and
`Ledger.apply` do for one batch.

Why: a Batch API job's lines were decided one batch per transaction, each batch's posts loaded
and written back one ORM record at a time. Here each saved output is checked and decided by
the same rules (R12, R13) and told to the breaker (R18) one by one; a batch whose every post
has a valid item, the usual case, is completed with the chunk's others by one statement, and
any other goes through `carry_out` on its own posts, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlmodel import Session

from postledger.analysis import Analysis
from postledger.batches.output import check_output
from postledger.failures.carry_out import carry_out
from postledger.failures.policy import Decision, after_output
from postledger.guards.breaker_state import apply_signal, breaker_for_update
from postledger.record import batch_chunks
from postledger.record.models import PostRecord, PostStatus
from postledger.record.reads import load_batches, posts_in
from postledger.record.states import Transitions
from postledger.settings import Limits


def finish(
    session: Session,
    moves: Transitions,
    batch_ids: Sequence[str],
    analysis: Analysis,
    limits: Limits,
    upstream: str | None,
) -> list[Decision]:
    """Each batch's decision, in order, carried out. The caller holds the month's lock, and
    the breakers' lock when an `upstream` is named."""
    month = moves.month
    decisions: list[Decision] = []
    completed: list[dict[str, Any]] = []
    batches = load_batches(session, batch_ids, unread=("request",))
    members = batch_chunks.members(session, month, batches, texts=False)
    # Held here, so that each signal finds the breaker in the session instead of reading it.
    _breaker = breaker_for_update(session, upstream) if upstream is not None else None
    for batch in batches:
        if batch.raw_output is None:
            raise ValueError(f"batch {batch.batch_id} has no saved output to finish from")
        check = check_output(batch.raw_output, batch.post_ids, analysis)
        in_it = members[batch.batch_id]
        plain = check.unusable is None and all(
            m.status is PostStatus.RECEIVED and m.post_id in check.valid for m in in_it
        )
        # Every post has a valid item: the policy reads nothing of a post but its id.
        posts = cast(list[PostRecord], in_it) if plain else posts_in(session, batch)
        decision = after_output(batch, posts, check, limits)
        decisions.append(decision)
        if upstream is not None and decision.signal is not None:
            why = f"{batch.batch_id}: {decision.why}"
            apply_signal(
                session, upstream, decision.signal, why, month=month, sent_at=batch.started_at
            )
        if not plain:
            carry_out(session, moves, batch, decision, check)
            continue
        # What `carry_out` does with a decision that completes every post: their results
        # saved first (R13), then the batch moved; no charge changes.
        completed += [
            {"pid": move.post_id, "why": move.why, "result": check.valid[move.post_id]}
            for move in decision.moves
        ]
        moves.batch(batch, decision.batch_to, decision.why, failure=decision.kind)
        batch.not_before = decision.batch_not_before
    moves.posts_with_values(PostStatus.RECEIVED, PostStatus.COMPLETED, completed, ["result"])
    return decisions
