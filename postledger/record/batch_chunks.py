"""A chunk of a submission's batches and their posts, read and moved in a few statements.

Why: on a Batch API one upstream job carries thousands of ledger batches. Marked running and
settled one at a time, each batch cost a transaction or three, an ORM load of its 25 posts and
an UPDATE per post: 20–28 ms a batch, most of a 100 000-post month's bookkeeping. Here a chunk
of batches is read by one query for the batches and one for their posts, and their posts are
moved by one executemany (`Transitions.posts_with_values`); each batch still moves through the
state machine and logs its events one by one (`Ledger.mark_running_many`, `save_outputs`,
`finish_outputs` sequence them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from sqlalchemy import String, literal, select, type_coerce
from sqlmodel import Session

from postledger.record.db import chunks
from postledger.record.in_list import any_of
from postledger.record.models import BatchRecord, BatchStatus, PostRecord, PostStatus
from postledger.record.reads import LedgerError
from postledger.record.states import Transitions


class Member(NamedTuple):
    """A post in a batch now, with what marking and settling read of it."""

    post_id: str
    text: str
    status: PostStatus
    attempts: int
    extra_attempts: int


_STATUS = {status.name: status for status in PostStatus}  # as the ORM stores them


def members(
    session: Session, month: str, batches: Sequence[BatchRecord], *, texts: bool = True
) -> dict[str, list[Member]]:
    """The posts that are in each batch now, in file order, as `posts_in` finds them: by key,
    among the ids each batch was planned with (a post may have moved on to a later batch).
    Not `texts`: their texts left empty (only a first send reads them)."""
    table = PostRecord.__table__  # type: ignore[attr-defined]
    batch_ids = [batch.batch_id for batch in batches]
    post_ids = [post_id for batch in batches for post_id in batch.post_ids]
    found: dict[str, list[tuple[int, Member]]] = defaultdict(list)
    connection = session.connection()
    for some in chunks(post_ids):
        query = select(
            table.c.batch_id,
            table.c.position,
            table.c.post_id,
            table.c.text if texts else literal(""),
            type_coerce(table.c.status, String),  # by name: no enum processing per row
            table.c.attempts,
            table.c.extra_attempts,
        ).where(
            table.c.month == month,
            any_of(connection, table.c.post_id, some),
            any_of(connection, table.c.batch_id, batch_ids),
        )
        for batch_id, position, post_id, text, status, *counts in connection.execute(query).all():
            member = Member(post_id, text, _STATUS[status], *counts)
            found[batch_id].append((position, member))
    return {batch_id: [m for _, m in sorted(found[batch_id])] for batch_id in batch_ids}


def start(
    moves: Transitions,
    batch: BatchRecord,
    queued: list[Member],
    *,
    upstream: str | None,
    holder: str | None,
) -> None:
    """The batch `running` and its request kept (R35), as `sending.start` does for one batch
    read by the ORM: its `queued` posts are the request of a first send."""
    moves.batch(batch, BatchStatus.RUNNING, "about to call the upstream")
    batch.upstream, batch.sent_by = upstream, holder
    if not queued:
        raise LedgerError(f"batch {batch.batch_id} has no post left to send")
    if batch.request is None:
        if len(queued) != len(batch.post_ids):
            raise LedgerError(
                f"batch {batch.batch_id} lists {len(batch.post_ids)} posts but only "
                f"{len(queued)} are queued in it: the ledger changed under this run"
            )
        batch.request = [[post.post_id, post.text] for post in queued]


class Queued(Protocol):
    """What sending reads of a queued post: a `Member` of a chunk, or a post's record."""

    @property
    def post_id(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def attempts(self) -> int: ...

    @property
    def extra_attempts(self) -> int: ...


def texts_to_send(batch: BatchRecord, queued: Sequence[Queued]) -> list[str]:
    """The texts `start` sends: the kept request of an earlier send, or the `queued` posts."""
    if batch.request is not None:
        return [text for _, text in batch.request]
    return [post.text for post in queued]


def check_caps(batch: BatchRecord, queued: Sequence[Queued], max_attempts: int) -> None:
    """A new paid attempt beyond a post's cap (R38) is refused: planning never asks for one."""
    over = [p.post_id for p in queued if p.attempts >= max_attempts + p.extra_attempts]
    if over:
        raise LedgerError(
            f"batch {batch.batch_id}: posts {over} have had every paid attempt they may "
            "have; this is a bug in postledger, nothing was sent"
        )


def attempts_counted(
    batch: BatchRecord, queued: list[Member], *, first: bool
) -> list[dict[str, Any]]:
    """The rows that move the batch's posts `running`, each with its business attempt counted
    when the send is a new attempt (R16, R38), and the why `sending.count_attempts` logs."""
    rows = []
    for post in queued:
        attempts = post.attempts + (1 if first else 0)
        same_key = "" if first else f", same key, send {batch.sends}"
        rows.append(
            {
                "pid": post.post_id,
                "why": f"{batch.batch_id} sent (attempt {attempts}{same_key})",
                "attempts": attempts,
            }
        )
    return rows
