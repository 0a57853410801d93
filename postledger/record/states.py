"""The state machine of posts and batches: the only place where a status changes.

Each transition is checked against a table, stamped, and written to the append-only event log
with from, to, why and when. An illegal transition raises `IllegalTransition` before anything
is changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any, NamedTuple

from sqlalchemy import (
    Connection,
    Integer,
    String,
    Text,
    Update,
    bindparam,
    cast,
    event,
    func,
    insert,
    literal,
    true,
    update,
)
from sqlalchemy import select as sql_select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlmodel import Session, select

from postledger.errors import PostledgerError
from postledger.record.batch_members import batch_members
from postledger.record.db import (
    CHUNK,
    STAGED_MOVES,
    chunks,
    execute_many,
    insert_many,
    rows_into,
    staged_from,
    staged_moves,
)
from postledger.record.in_list import any_of
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    BreakerEventRecord,
    BreakerLevel,
    BreakerRecord,
    EntityKind,
    EventRecord,
    FailureKind,
    PostRecord,
    PostStatus,
    utcnow,
)
from postledger.record.post_counts import CountChanges

P = PostStatus
B = BatchStatus

# Any post whose input changed (R25) starts over as pending, whatever it was.
_RESTART = {P.PENDING}

POST_TRANSITIONS: Mapping[PostStatus, frozenset[PostStatus]] = {
    P.PENDING: frozenset({P.QUEUED, P.FAILED}),
    P.QUEUED: frozenset({P.RUNNING, P.PENDING}),
    P.WAITING: frozenset({P.QUEUED, P.PENDING, P.FAILED}),
    P.RUNNING: frozenset({P.RECEIVED, P.WAITING, P.QUEUED, P.FAILED} | _RESTART),
    P.RECEIVED: frozenset({P.COMPLETED, P.QUEUED, P.FAILED} | _RESTART),
    P.COMPLETED: frozenset(_RESTART),
    P.FAILED: frozenset({P.QUEUED} | _RESTART),
}

BATCH_TRANSITIONS: Mapping[BatchStatus, frozenset[BatchStatus]] = {
    # queued -> failed: sent before (so maybe paid), and every post of it changed since (R25).
    B.QUEUED: frozenset({B.RUNNING, B.CANCELLED, B.FAILED}),
    # running -> queued: sent again later with the same idempotency key, which an upstream that
    # honours keys answers with the task it may already have made, at no new charge.
    B.RUNNING: frozenset({B.RECEIVED, B.FAILED, B.QUEUED}),
    B.RECEIVED: frozenset({B.COMPLETED, B.FAILED}),
    B.COMPLETED: frozenset(),
    B.FAILED: frozenset(),
    B.CANCELLED: frozenset(),
}


L = BreakerLevel

# R18, R19: normal -> probe -> open on final transport failures; a success in probe closes it;
# only a person's "continue" leaves open, and then to probe (one batch at a time first).
BREAKER_TRANSITIONS: Mapping[BreakerLevel, frozenset[BreakerLevel]] = {
    L.NORMAL: frozenset({L.PROBE}),
    L.PROBE: frozenset({L.NORMAL, L.OPEN}),
    L.OPEN: frozenset({L.PROBE}),
}


class IllegalTransition(PostledgerError):
    """A status change that the state machine does not allow; nothing was changed."""

    def __init__(self, entity: str, entity_id: str, current: str, target: str) -> None:
        super().__init__(
            f"{entity} {entity_id!r}: {current} -> {target} is not allowed "
            f"(this is a bug in postledger: the ledger was left as it was)"
        )
        self.current = current
        self.target = target


# A bulk move of this many posts or more is staged in a table, joined by one UPDATE and logged
# by one INSERT … SELECT (a month's plan: 100 000 UPDATEs by key are 100 000 statements); a
# smaller one, such as the few posts of a retry, stays one executemany: a round trip or two.
STAGE_FROM = 1_000
# The executemany's parameters, by the names the staged table gives its columns.
_BOUND = SimpleNamespace(pid=bindparam("pid"), why=bindparam("why"))


class PostChange(NamedTuple):
    """One post of a bulk move (`Transitions.posts_by_id`), and why it moves. A tuple: a
    month's plan may fail thousands of them at once (too long, no paid attempt left)."""

    post_id: str
    why: str


class LedgerConflict(PostledgerError):
    """Records changed under a bulk move; the transaction is rolled back."""


def _all_moved(moved: int, count: int, current: PostStatus, target: PostStatus) -> None:
    if moved != count:
        raise LedgerConflict(
            f"{count - moved} of {count} posts to move {current} -> {target} were not "
            f"{current} any more: nothing was changed"
        )


def post_can_move(current: PostStatus, target: PostStatus) -> bool:
    return target in POST_TRANSITIONS[current]


def batch_can_move(current: BatchStatus, target: BatchStatus) -> bool:
    return target in BATCH_TRANSITIONS[current]


class Transitions:
    """Status changes for one month, inside one write transaction that holds the month's lock."""

    def __init__(self, session: Session, month: str) -> None:
        self._session = session
        self._month = month
        self._next_seq: int | None = None
        self._events: list[dict[str, object]] = []
        # What the logged moves of posts change in the month's counts, written with them.
        self._counts = CountChanges()
        # Logged events reach the database with the session's next flush or commit.
        event.listen(session, "before_flush", self.write_events)
        event.listen(session, "before_commit", self.write_events)

    @property
    def month(self) -> str:
        return self._month

    def post(
        self,
        post: PostRecord,
        target: PostStatus,
        why: str,
        *,
        failure: FailureKind | None = None,
    ) -> None:
        """Move `post` to `target`; `failure` is required exactly when `target` is failed."""
        if not post_can_move(post.status, target):
            raise IllegalTransition(EntityKind.POST, post.post_id, post.status, target)
        if (target is P.FAILED) != (failure is not None):
            raise ValueError("a failed post needs a failure kind, and only a failed post has one")
        self._log(EntityKind.POST, post.post_id, post.status, target, why)
        post.status = target
        post.failure_kind = failure
        post.failure_reason = why if failure is not None else None
        if target is not P.WAITING:
            post.not_before = None
        post.updated_at = utcnow()
        self._session.add(post)

    def posts_by_id(
        self,
        current: PostStatus,
        target: PostStatus,
        changes: Sequence[PostChange],
        *,
        failure: FailureKind | None = None,
    ) -> None:
        """Move many posts, all now `current`, to `target`: what `post` does for one record,
        in one executemany per chunk and without loading the records (planning a month moves
        every post of it). A post not `current` any more fails the whole transaction."""
        if not changes:
            return
        if not post_can_move(current, target):
            raise IllegalTransition(EntityKind.POST, changes[0].post_id, current, target)
        if (target is P.FAILED) != (failure is not None):
            raise ValueError("a failed post needs a failure kind, and only a failed post has one")
        # Numbered for the staged path's events; the bound path binds only pid and why.
        rows = [{"n": n, "pid": c.post_id, "why": c.why} for n, c in enumerate(changes)]
        connection = self._session.connection()
        # Each row's values: from a table the rows were staged in, joined by one UPDATE and
        # logged by one INSERT … SELECT (a month's plan), or bound per row of an executemany
        # (the few posts of a batch or a retry: a round trip or two).
        staged = len(rows) >= STAGE_FROM
        if staged:
            self.write_events()  # the events logged before this move keep their place
            row: Any = staged_moves(connection, rows).c
        else:
            for change in changes:
                self._log(EntityKind.POST, change.post_id, current, target, change.why)
            row = _BOUND
        statement = self._move(current, target, row.pid, why=row.why, failure=failure)
        if staged:
            self._move_staged(statement, current, target, len(rows))
        else:
            moved = sum(execute_many(connection, statement, chunk) for chunk in chunks(rows))
            _all_moved(moved, len(rows), current, target)

    def posts_with_values(
        self,
        current: PostStatus,
        target: PostStatus,
        rows: Sequence[Mapping[str, Any]],
        columns: Sequence[str] = (),
        *,
        same: Mapping[str, Any] | None = None,
    ) -> None:
        """Move many posts, all now `current`, to a `target` that is not failed: `posts_by_id`
        for the chunk of batches a submission marks or settles at once. `rows`: each post's
        `pid`, `why` and its own value of each of `columns` (a result); `same`: values set on
        every one of them (an attempt counted: `attempts + 1`). With `columns`, one
        executemany per chunk; without, one UPDATE per chunk, the posts named by an IN list.
        A post not `current` any more fails the whole transaction."""
        if not rows:
            return
        if not post_can_move(current, target):
            raise IllegalTransition(EntityKind.POST, str(rows[0]["pid"]), current, target)
        if target is P.FAILED:
            raise ValueError("a failed post needs a failure kind: move it by `posts_by_id`")
        self._log_posts(current, target, rows)
        values: dict[str, Any] = {column: bindparam(column) for column in columns}
        values.update(same or {})
        connection = self._session.connection()
        if columns and connection.dialect.name == "postgresql":
            moved = sum(
                self._move_unnested(connection, current, target, chunk, columns, same or {})
                for chunk in chunks(rows)
            )
        elif columns:
            statement = self._move(
                current, target, _BOUND.pid, why=_BOUND.why, values=values, by_key=True
            )
            moved = sum(execute_many(connection, statement, chunk) for chunk in chunks(rows))
        else:
            table = PostRecord.__table__  # type: ignore[attr-defined]
            moved = 0
            for chunk in chunks(rows):
                named = any_of(connection, table.c.post_id, [row["pid"] for row in chunk])
                statement = self._move(current, target, None, why=None, values=values, by_key=True)
                moved += int(connection.execute(statement.where(named)).rowcount)
        _all_moved(moved, len(rows), current, target)

    def _move_unnested(
        self,
        connection: Connection,
        current: PostStatus,
        target: PostStatus,
        rows: Sequence[Mapping[str, Any]],
        columns: Sequence[str],
        same: Mapping[str, Any],
    ) -> int:
        """PostgreSQL: the rows' moves as one UPDATE joined to their values, each column one
        array parameter (`unnest`): an executemany ran the statement once per post. Values
        go as text, as the column's bind processor makes them, and are cast back."""
        table = PostRecord.__table__  # type: ignore[attr-defined]
        dialect = connection.dialect
        arrays = [func.unnest(bindparam(None, [row["pid"] for row in rows], ARRAY(String)))]
        for column in columns:
            process = table.c[column].type.dialect_impl(dialect).bind_processor(dialect)
            texts = [row[column] if process is None else process(row[column]) for row in rows]
            arrays.append(func.unnest(bindparam(None, texts, ARRAY(Text))))
        given = sql_select(*(a.label(f"v{n}") for n, a in enumerate(arrays))).subquery()
        values = {
            column: cast(given.c[f"v{n}"], table.c[column].type)
            for n, column in enumerate(columns, start=1)
        }
        statement = self._move(
            current, target, given.c.v0, why=None, values={**same, **values}, by_key=True
        )
        return int(connection.execute(statement).rowcount)

    def _log_posts(
        self, current: PostStatus, target: PostStatus, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Log a bulk move of posts (`pid`, `why`), numbered in the rows' order, with one
        stamp: what `_log` does per post, without a call per post."""
        self._counts.moved(current, target, len(rows))
        first, at = self._take_seq(len(rows)), utcnow()
        month, entity = self._month, EntityKind.POST
        self._events.extend(
            {
                "month": month,
                "seq": seq,
                "entity": entity,
                "entity_id": row["pid"],
                "from_status": current,
                "to_status": target,
                "why": row["why"],
                "at": at,
            }
            for seq, row in enumerate(rows, start=first)
        )

    def posts_into_batches(self, first_seq: int, last_seq: int, count: int) -> None:
        """Move the `count` pending posts that the month's batches `first_seq` to `last_seq`
        (just planned) name to `queued`, each into its batch: one UPDATE, logged by one
        INSERT … SELECT in the batches' order. The pairs are read by the database from the
        batches' own post ids (`batch_members`): none is sent to it."""
        if count == 0:
            return
        self.write_events()  # the batches' births keep their place before these
        connection = self._session.connection()
        member = batch_members(connection.dialect, self._month, first_seq, last_seq).c
        # Staged first, as a bulk move by id is: joined to the posts straight from the JSON,
        # SQLite read every batch's ids again for each post.
        row = staged_from(
            connection,
            sql_select(
                func.row_number().over(order_by=(member.seq, member.place)) - 1,
                member.post_id,
                literal("planned in ", Text) + member.batch_id,
                member.batch_id,
            ),
        ).c
        statement = self._move(P.PENDING, P.QUEUED, row.pid, why=row.why, into=row.into)
        self._move_staged(statement, P.PENDING, P.QUEUED, count)

    def _move_staged(
        self, statement: Update, current: PostStatus, target: PostStatus, count: int
    ) -> None:
        """Run a move joined to the staged rows, check that each of them moved, log them."""
        moved = int(self._session.connection().execute(statement).rowcount)
        _all_moved(moved, count, current, target)
        self._log_staged(current, target, count)

    def _move(
        self,
        current: PostStatus,
        target: PostStatus,
        post_id: Any,
        *,
        why: Any,
        failure: FailureKind | None = None,
        into: Any = None,
        values: Mapping[str, Any] | None = None,
        by_key: bool = False,
    ) -> Update:
        """The UPDATE that moves the month's post `post_id` (a column or a parameter) from
        `current` to `target`, as `post` does for one record; `values`: other columns set
        with it (the caller's to change: an attempt, a result). `by_key`: the status is
        compared as text, which no index serves, so that each post is found by its key:
        PostgreSQL otherwise chose the month's index by status, and read every post of the
        month in that state for each post moved (thousands of moves a submission)."""
        table = PostRecord.__table__  # type: ignore[attr-defined]
        changes: dict[str, object] = {
            **(values or {}),
            "status": target,
            "failure_kind": failure,
            "failure_reason": why if failure is not None else None,
            "updated_at": utcnow(),
        }
        if target is not P.WAITING:
            changes["not_before"] = None
        if into is not None:
            changes["batch_id"] = into
        return (
            update(table)
            .where(
                table.c.month == self._month,
                true() if post_id is None else table.c.post_id == post_id,
                cast(table.c.status, String) == current.name
                if by_key
                else table.c.status == current,
            )
            .values(changes)
        )

    def batch(
        self,
        batch: BatchRecord,
        target: BatchStatus,
        why: str,
        *,
        failure: FailureKind | None = None,
    ) -> None:
        if not batch_can_move(batch.status, target):
            raise IllegalTransition(EntityKind.BATCH, batch.batch_id, batch.status, target)
        if (target is B.FAILED) != (failure is not None):
            raise ValueError("a failed batch needs a failure kind, and only a failed batch has one")
        self._log(EntityKind.BATCH, batch.batch_id, batch.status, target, why)
        now = utcnow()
        batch.status = target
        batch.failure_kind = failure
        batch.failure_reason = why if failure is not None else None
        if target is B.RUNNING:
            batch.started_at = now
        if target in (B.COMPLETED, B.FAILED, B.CANCELLED):
            batch.finished_at = now
        batch.updated_at = now
        self._session.add(batch)

    def created(self, entity: EntityKind, entity_id: str, status: str, why: str) -> None:
        """Log the birth of a record: its first status has no `from`."""
        self._log(entity, entity_id, None, status, why)

    def created_all(
        self, entity: EntityKind, entity_ids: Sequence[str], status: str, why: str
    ) -> None:
        """Log the birth of many records, in their order (a month's new posts): written now,
        a chunk at a time, none of them kept."""
        if not entity_ids:
            return
        self.write_events()  # the events logged before these keep their place
        if entity is EntityKind.POST:
            self._counts.moved(None, status, len(entity_ids))
        first = self._take_seq(len(entity_ids))
        at = utcnow()
        events = EventRecord.__table__  # type: ignore[attr-defined]
        with rows_into(self._session.connection(), events) as insert_rows:
            for offset, some in zip(
                range(first, first + len(entity_ids), CHUNK), chunks(entity_ids), strict=True
            ):
                insert_rows(
                    [
                        {
                            "month": self._month,
                            "seq": seq,
                            "entity": entity,
                            "entity_id": entity_id,
                            "from_status": None,
                            "to_status": status,
                            "why": why,
                            "at": at,
                        }
                        for seq, entity_id in enumerate(some, start=offset)
                    ]
                )

    def noted(self, entity: EntityKind, entity_id: str, status: str, why: str) -> None:
        """Log something that happened to a record without changing its status."""
        self._log(entity, entity_id, status, status, why)

    def _log(
        self, entity: EntityKind, entity_id: str, current: str | None, target: str, why: str
    ) -> None:
        if entity is EntityKind.POST:
            self._counts.moved(current, target)
        self._events.append(
            {
                "month": self._month,
                "seq": self._take_seq(1),
                "entity": entity,
                "entity_id": entity_id,
                "from_status": current,
                "to_status": target,
                "why": why,
                "at": utcnow(),
            }
        )

    def _log_staged(self, current: PostStatus, target: PostStatus, count: int) -> None:
        """Log the staged posts' move in one INSERT … SELECT: an event per post, numbered in
        the rows' order, none of them built in Python."""
        self._counts.moved(current, target, count)
        first = self._take_seq(count)
        events = EventRecord.__table__  # type: ignore[attr-defined]
        staged = STAGED_MOVES.c
        rows = sql_select(
            literal(self._month, events.c.month.type),
            literal(first, Integer) + staged.n,
            literal(EntityKind.POST, events.c.entity.type),
            staged.pid,
            literal(current, events.c.from_status.type),
            literal(target, events.c.to_status.type),
            staged.why,
            literal(utcnow(), events.c.at.type),
        ).order_by(staged.n)
        columns = ["month", "seq", "entity", "entity_id", "from_status", "to_status", "why", "at"]
        self._session.connection().execute(insert(events).from_select(columns, rows))

    def _take_seq(self, count: int) -> int:
        """The first of `count` numbers of the month's event sequence, taken in order."""
        if self._next_seq is None:
            last = self._session.exec(
                select(func.max(EventRecord.seq)).where(EventRecord.month == self._month)
            ).one()
            self._next_seq = (last or 0) + 1
        first = self._next_seq
        self._next_seq += count
        return first

    def write_events(self, *_: object) -> None:
        """Insert the logged events in one statement: a batch moves 25 posts at once, and an
        ORM object per event cost more than the rest of the transaction. Called at the
        session's flush and commit, and by a long step (a month's sync) to keep only a chunk
        of them in memory. The month's post counts are brought up to date with them."""
        if self._events:
            events = EventRecord.__table__  # type: ignore[attr-defined]
            insert_many(self._session.connection(), events, self._events)
            self._events = []
        if self._counts:
            self._counts.write(self._session.connection(), self._month)


def move_breaker(
    session: Session,
    breaker: BreakerRecord,
    target: BreakerLevel,
    why: str,
    *,
    month: str | None = None,
) -> None:
    """Change a breaker's level (in the caller's transaction, which holds the breaker lock)."""
    if target not in BREAKER_TRANSITIONS[breaker.level]:
        raise IllegalTransition("breaker", breaker.upstream, breaker.level, target)
    note_breaker(session, breaker, why, month=month, target=target)
    breaker.level = target
    breaker.reason = why
    breaker.changed_at = utcnow()
    session.add(breaker)


def note_breaker(
    session: Session,
    breaker: BreakerRecord,
    why: str,
    *,
    month: str | None = None,
    target: BreakerLevel | None = None,
) -> None:
    """Log something that happened to a breaker; with no `target`, its level stays."""
    session.add(
        BreakerEventRecord(
            upstream=breaker.upstream,
            month=month,
            from_level=breaker.level,
            to_level=target or breaker.level,
            why=why,
        )
    )
