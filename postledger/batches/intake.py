"""The input file into the ledger: every post of it known, and changed input started over
(R25), in the month's write transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlmodel import Session, select

from postledger.batches.posts import (
    Post,
    changed_parts,
    fingerprint,
    input_parts,
    legacy_fingerprint,
)
from postledger.record.models import EntityKind, PostRecord, PostStatus
from postledger.record.states import Transitions


@dataclass(frozen=True)
class SyncReport:
    new: int
    unchanged: int
    changed: int


def sync_posts(
    session: Session,
    moves: Transitions,
    month: str,
    posts: Sequence[Post],
    *,
    model: str,
    prompt: str,
) -> SyncReport:
    """New posts `pending`, unchanged ones as they were, changed ones (text, model or prompt)
    back to `pending`, with nothing of their old work (R25, R50)."""
    new = unchanged = changed = 0
    known = {
        p.post_id: p for p in session.exec(select(PostRecord).where(PostRecord.month == month))
    }
    for position, post in enumerate(posts):
        parts = input_parts(post.text, model, prompt)
        print_ = fingerprint(post.text, model, prompt)
        record = known.get(post.id)
        if record is None:
            session.add(
                PostRecord(
                    month=month,
                    post_id=post.id,
                    position=position,
                    text=post.text,
                    fingerprint=print_,
                    inputs=parts,
                )
            )
            moves.created(EntityKind.POST, post.id, PostStatus.PENDING, "read from input")
            new += 1
            continue
        record.position = position
        if record.inputs is None and record.fingerprint == legacy_fingerprint(
            post.text, model, prompt
        ):
            record.fingerprint, record.inputs = print_, parts  # same work, new digest
        if record.fingerprint == print_:
            unchanged += 1
            session.add(record)
            continue
        # R25: nothing of the old work is reused: not its result, not its batch.
        changed += 1
        why = f"input changed ({changed_parts(record.inputs, parts)}): starts over"
        record.text, record.fingerprint, record.inputs = post.text, print_, parts
        record.result, record.batch_id = None, None
        # New work: its own limits (R38, R40), whatever the old input cost.
        record.attempts, record.requeues, record.extra_attempts = 0, 0, 0
        record.split = False
        if record.status is PostStatus.PENDING:
            session.add(record)
        else:
            moves.post(record, PostStatus.PENDING, why)
    return SyncReport(new=new, unchanged=unchanged, changed=changed)
