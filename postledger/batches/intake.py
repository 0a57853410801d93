"""The input file into the ledger: every post of it known, and changed input started over
(R25), in the month's write transaction.

A month is up to a million posts, and most runs find them all unchanged, so this is done in
bulk and a chunk at a time as the file is read: each chunk's known posts are read as plain rows
(five columns, no ORM objects) by their ids, its new posts are inserted at once (on PostgreSQL
by one COPY), and only the rare changed post is loaded as a record to be moved through the
state machine. A
sync of an unchanged month writes nothing at all. A post whose own fields alone changed (its
author, its source) keeps its work: only the fields are written, as the report shows them,
never the fingerprint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, select

from postledger.analysis import Analysis, fields_version
from postledger.analysis.default import DEFAULT_FIELDS_VERSION
from postledger.batches.posts import InputDigest, Post, changed_parts, legacy_fingerprint
from postledger.record.db import CHUNK, chunks, insert_many
from postledger.record.in_list import any_of
from postledger.record.models import EntityKind, PostRecord, PostStatus, utcnow
from postledger.record.states import Transitions


@dataclass(frozen=True)
class SyncReport:
    new: int
    unchanged: int
    changed: int


# Posts of the file per step: read, compared with the ledger and written together, so that a
# sync holds a chunk of the month, never the month (a million posts are 1.8 GB as objects).
SYNC_CHUNK = CHUNK


def sync_posts(
    session: Session,
    moves: Transitions,
    month: str,
    posts: Iterable[Post],
    *,
    model: str,
    analysis: Analysis,
) -> SyncReport:
    """New posts `pending`, unchanged ones as they were, changed ones (text, model or the
    analysis) back to `pending`, with nothing of their old work (R25, R50). `posts` is read a
    chunk at a time (`SYNC_CHUNK`), each chunk compared with the ledger's rows of its own ids
    and written before the next is read."""
    c = PostRecord.__table__.c  # type: ignore[attr-defined]
    # A month the ledger has never seen (its first run) has nothing to compare with.
    knows_month = (
        session.connection().execute(sa_select(c.post_id).where(c.month == month).limit(1)).first()
        is not None
    )
    step = _SyncStep(session, moves, month, InputDigest(model, analysis), analysis, model)
    chunk: list[Post] = []
    for post in posts:
        chunk.append(post)
        if len(chunk) == SYNC_CHUNK:
            step.sync(chunk, knows_month)
            chunk = []
    step.sync(chunk, knows_month)
    return SyncReport(new=step.new, unchanged=step.unchanged, changed=step.changed)


class _SyncStep:
    """The sync of one chunk of the file after another, and what they found."""

    def __init__(
        self,
        session: Session,
        moves: Transitions,
        month: str,
        digest: InputDigest,
        analysis: Analysis,
        model: str,
    ) -> None:
        self._session, self._moves, self._month, self._digest = session, moves, month, digest
        self._model, self._instructions = model, analysis.instructions
        # Ledgers older than the fingerprint's parts knew only the built-in fields.
        self._legacy = fields_version(analysis) == DEFAULT_FIELDS_VERSION
        self._now = utcnow()
        self.position = 0  # the next post's place in the file
        self.new = self.unchanged = self.changed = 0

    def _known(self, posts: list[Post]) -> dict[str, tuple[int, str, bool, str]]:
        """The ledger's rows of these posts, as five plain columns (no ORM objects)."""
        c = PostRecord.__table__.c  # type: ignore[attr-defined]
        connection = self._session.connection()
        listed = any_of(connection, c.post_id, [post.id for post in posts])
        rows = connection.execute(
            sa_select(c.post_id, c.position, c.fingerprint, c.inputs.is_(None), c.fields).where(
                c.month == self._month, listed
            )
        ).all()  # at once: iterated, SQLAlchemy fetches a row per call
        return {
            post_id: (position, known_print, no_inputs, fields or "")
            for post_id, position, known_print, no_inputs, fields in rows
        }

    def sync(self, posts: list[Post], knows_month: bool) -> None:
        if not posts:
            return
        month, digest, now = self._month, self._digest, self._now
        known = self._known(posts) if knows_month else {}
        new: list[dict[str, Any]] = []
        new_ids: list[str] = []
        moved: list[dict[str, Any]] = []  # unchanged posts whose line in the file moved
        upgraded: list[dict[str, Any]] = []  # same work under the old digest: the new one kept
        # Unchanged work whose own fields changed, or were never kept (synced before 0005).
        refreshed: list[dict[str, Any]] = []
        changed: dict[str, tuple[int, Post, dict[str, str], str]] = {}
        for position, post in enumerate(posts, start=self.position):
            parts, print_ = digest.of(post.text)
            if (row := known.get(post.id)) is None:
                new.append(_new_row(month, post, position, print_, parts, now))
                new_ids.append(post.id)
                continue
            known_position, known_print, no_inputs, known_fields = row
            if (
                self._legacy
                and no_inputs
                and known_print == legacy_fingerprint(post.text, self._model, self._instructions)
            ):
                upgraded.append({"pid": post.id, "fingerprint": print_, "inputs": parts})
            elif known_print != print_:
                changed[post.id] = (position, post, parts, print_)
                continue
            self.unchanged += 1
            if known_position != position:
                moved.append({"pid": post.id, "position": position})
            if known_fields != post.fields:
                refreshed.append({"pid": post.id, "fields": post.fields or None})
        self.position += len(posts)
        connection = self._session.connection()
        table = PostRecord.__table__  # type: ignore[attr-defined]
        insert_many(connection, table, new)
        self._moves.created_all(EntityKind.POST, new_ids, PostStatus.PENDING, "read from input")
        where = (table.c.month == month) & (table.c.post_id == bindparam("pid"))
        for rows in (moved, upgraded, refreshed):
            for some in chunks(rows):
                connection.execute(update(table).where(where), some)
        _start_over(self._session, self._moves, month, changed)
        self.new += len(new_ids)
        self.changed += len(changed)


def _new_row(
    month: str, post: Post, position: int, print_: str, parts: dict[str, str], now: Any
) -> dict[str, Any]:
    return {
        "month": month,
        "post_id": post.id,
        "position": position,
        "text": post.text,
        "fields": post.fields or None,
        "fingerprint": print_,
        "inputs": parts,
        "status": PostStatus.PENDING,
        "attempts": 0,
        "extra_attempts": 0,
        "requeues": 0,
        "split": False,
        "batch_id": None,
        "result": None,
        "failure_kind": None,
        "failure_reason": None,
        "not_before": None,
        "created_at": now,
        "updated_at": now,
    }


def _start_over(
    session: Session,
    moves: Transitions,
    month: str,
    changed: dict[str, tuple[int, Post, dict[str, str], str]],
) -> None:
    """R25: nothing of the old work is reused: not its result, not its batch."""
    ids = list(changed)
    for some in chunks(ids):
        records = session.exec(
            select(PostRecord).where(
                PostRecord.month == month, any_of(session.connection(), PostRecord.post_id, some)
            )
        )
        for record in records:
            position, post, parts, print_ = changed[record.post_id]
            why = f"input changed ({changed_parts(record.inputs, parts)}): starts over"
            record.position = position
            record.text, record.fingerprint, record.inputs = post.text, print_, parts
            record.fields = post.fields or None
            record.result, record.batch_id = None, None
            # New work: its own limits (R38, R40), whatever the old input cost.
            record.attempts, record.requeues, record.extra_attempts = 0, 0, 0
            record.split = False
            if record.status is PostStatus.PENDING:
                session.add(record)
            else:
                moves.post(record, PostStatus.PENDING, why)
    if changed:
        session.flush()  # the chunk's records written and let go: a sync holds no month of them
