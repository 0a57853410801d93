"""The input file into the ledger: every post of it known, and changed input started over
(R25), in the month's write transaction.

A month is tens to hundreds of thousands of posts, and most runs find them all unchanged, so
this is done in bulk: the known posts are read as plain rows (five columns, no ORM objects),
new posts are inserted a chunk at a time as the file is read (on PostgreSQL by one COPY), and
only the rare changed post is loaded as a record to be moved through the state machine. A
sync of an unchanged month writes nothing at all. A post whose own fields alone changed (its
author, its source) keeps its work: only the fields are written, as the report shows them,
never the fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from postledger.analysis import Analysis, fields_version
from postledger.analysis.default import DEFAULT_FIELDS_VERSION
from postledger.batches.posts import InputDigest, Post, changed_parts, legacy_fingerprint
from postledger.record.db import CHUNK, chunks, rows_into
from postledger.record.models import EntityKind, PostRecord, PostStatus, utcnow
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
    analysis: Analysis,
) -> SyncReport:
    """New posts `pending`, unchanged ones as they were, changed ones (text, model or the
    analysis) back to `pending`, with nothing of their old work (R25, R50)."""
    table = PostRecord.__table__  # type: ignore[attr-defined]
    c = table.c  # five columns: more than sqlmodel's `select` takes
    known: dict[str, tuple[int, str, bool, str]] = {
        post_id: (position, known_print, no_inputs, fields or "")
        for post_id, position, known_print, no_inputs, fields in session.connection().execute(
            sa_select(c.post_id, c.position, c.fingerprint, c.inputs.is_(None), c.fields).where(
                c.month == month
            )
        )
    }
    new: list[dict[str, Any]] = []  # inserted a chunk at a time: memory bounded by a chunk
    new_ids: list[str] = []
    moved: list[dict[str, Any]] = []  # unchanged posts whose line in the file moved
    upgraded: list[dict[str, Any]] = []  # same work under the old digest: the new one kept
    # Unchanged work whose own fields changed, or were never kept (synced before 0005).
    refreshed: list[dict[str, Any]] = []
    changed: dict[str, tuple[int, Post, dict[str, str], str]] = {}
    unchanged = 0
    now = utcnow()
    digest = InputDigest(model, analysis)
    # Ledgers older than the fingerprint's parts knew only the built-in fields.
    legacy = fields_version(analysis) == DEFAULT_FIELDS_VERSION
    # Nothing else is written until the new posts are: on PostgreSQL their COPY stays open
    # while the file is read.
    with rows_into(session.connection(), table) as insert_posts:
        for position, post in enumerate(posts):
            parts, print_ = digest.of(post.text)
            if (row := known.get(post.id)) is None:
                new.append(_new_row(month, post, position, print_, parts, now))
                new_ids.append(post.id)
                if len(new) == CHUNK:
                    insert_posts(new)
                    new = []
                continue
            known_position, known_print, no_inputs, known_fields = row
            if (
                legacy
                and no_inputs
                and known_print == legacy_fingerprint(post.text, model, analysis.instructions)
            ):
                upgraded.append({"pid": post.id, "fingerprint": print_, "inputs": parts})
            elif known_print != print_:
                changed[post.id] = (position, post, parts, print_)
                continue
            unchanged += 1
            if known_position != position:
                moved.append({"pid": post.id, "position": position})
            if known_fields != post.fields:
                refreshed.append({"pid": post.id, "fields": post.fields or None})
        insert_posts(new)
    moves.created_all(EntityKind.POST, new_ids, PostStatus.PENDING, "read from input")
    where = (table.c.month == month) & (table.c.post_id == bindparam("pid"))
    for chunk in chunks(moved):
        session.connection().execute(update(table).where(where), chunk)
    for chunk in chunks(upgraded):
        session.connection().execute(update(table).where(where), chunk)
    for chunk in chunks(refreshed):
        session.connection().execute(update(table).where(where), chunk)
    _start_over(session, moves, month, changed)
    return SyncReport(new=len(new_ids), unchanged=unchanged, changed=len(changed))


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
            select(PostRecord).where(PostRecord.month == month, col(PostRecord.post_id).in_(some))
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
