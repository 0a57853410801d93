"""Costs that do not grow with the month: what the ledger writes when nothing changed, how a
batch's own steps find their rows, and what SQLite does for one batch in a small and in a big
month (not timed: see bench/scale.py and bench/month.py for the times)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import IntegrityError

from postledger.batches.posts import Post
from postledger.ledger import Ledger
from postledger.record.db import CHUNK, rows_into
from postledger.record.models import EntityKind, EventRecord, PostStatus, utcnow
from tests.support.ledger_backend import sqlite_ledger_only
from tests.support.ledgers import WRITES, asked, settle_next_batch, statements

MONTH = "2026-10"


def month_of_posts(n: int) -> list[Post]:
    return [Post(f"p{i:05d}", f"post {i}: the app logs me out", i + 1) for i in range(n)]


def test_a_sync_of_an_unchanged_month_writes_nothing(any_ledger_url: str) -> None:
    ledger = Ledger(any_ledger_url)
    month = month_of_posts(300)
    assert ledger.sync_posts(MONTH, month, model="m", analysis=asked()).new == 300
    ledger.plan(MONTH, max_posts=25, max_chars=10_000)

    with statements(ledger) as seen:
        again = ledger.sync_posts(MONTH, month, model="m", analysis=asked())
    assert (again.new, again.unchanged, again.changed) == (0, 300, 0)
    assert [sql for sql, _ in seen if WRITES.match(sql)] == []

    # A post that moved in the file is one position written, nothing else.
    moved = [month[1], month[0], *month[2:]]
    with statements(ledger) as seen:
        ledger.sync_posts(MONTH, moved, model="m", analysis=asked())
    writes = [(sql, parameters) for sql, parameters in seen if WRITES.match(sql)]
    assert len(writes) == 1 and writes[0][0].lstrip().upper().startswith("UPDATE POSTS")
    assert len(writes[0][1]) == 2  # two rows of one executemany
    ledger.close()


def test_a_month_of_several_chunks_is_synced_whole_its_events_in_file_order(
    any_ledger_url: str,
) -> None:
    """New posts go in a chunk at a time as the file is read (on PostgreSQL by one COPY left
    open), and their events after them: every post, every event, numbered in file order after
    the events already logged."""
    ledger = Ledger(any_ledger_url)
    first = month_of_posts(CHUNK + 10)
    ledger.sync_posts(MONTH, first[:10], model="m", analysis=asked())
    report = ledger.sync_posts(
        MONTH, first + [Post("last", "the end", 1)], model="m", analysis=asked()
    )
    assert (report.new, report.unchanged) == (CHUNK + 1, 10)
    posts = ledger.posts(MONTH)
    assert [p.post_id for p in posts] == [p.id for p in first] + ["last"]
    assert {p.status for p in posts} == {PostStatus.PENDING}
    events = ledger.events(MONTH)
    assert [e.seq for e in events] == list(range(1, CHUNK + 12))
    assert [e.entity_id for e in events] == [p.id for p in first] + ["last"]
    assert {(e.from_status, e.to_status) for e in events} == {(None, "pending")}
    ledger.close()


def test_a_plan_moves_each_post_into_the_batch_that_names_it_logged_in_batch_order(
    any_ledger_url: str,
) -> None:
    """The database reads the pairs from the batches just written (`batch_members`): every
    pending post ends in the batch whose post ids name it, logged batch by batch, post by
    post; a post too long for any batch is left out, and a later plan moves only its own."""
    ledger = Ledger(any_ledger_url)
    month = month_of_posts(40)
    month[7] = Post(month[7].id, "x" * 400, month[7].line)  # alone over max_chars
    ledger.sync_posts(MONTH, month, model="m", analysis=asked())
    ledger.plan(MONTH, max_posts=6, max_chars=300)
    ledger.sync_posts(MONTH, [*month, *month_of_posts(45)[40:]], model="m", analysis=asked())
    planned_before = len(ledger.events(MONTH))
    ledger.plan(MONTH, max_posts=6, max_chars=300)

    batches = ledger.batches(MONTH)
    posts = {post.post_id: post for post in ledger.posts(MONTH)}
    named = {pid: batch.batch_id for batch in batches for pid in batch.post_ids}
    assert len(named) == 44 and month[7].id not in named
    for post_id, batch_id in named.items():
        assert (posts[post_id].status, posts[post_id].batch_id) == (PostStatus.QUEUED, batch_id)
    assert posts[month[7].id].status is PostStatus.FAILED

    events = ledger.events(MONTH)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    moves = [
        (e.entity_id, e.why)
        for e in events
        if e.entity is EntityKind.POST and (e.from_status, e.to_status) == ("pending", "queued")
    ]
    expected = [
        (pid, f"planned in {batch.batch_id}")
        for batch in sorted(batches, key=lambda b: b.seq)
        for pid in batch.post_ids
    ]
    assert moves == expected
    # The second plan: the new posts' one batch, its birth before its posts' moves.
    (last,) = [b for b in batches if b.seq == max(b.seq for b in batches)]
    assert last.post_ids == [p.id for p in month_of_posts(45)[40:]]
    tail = [(e.entity_id, e.to_status) for e in events[planned_before:]]
    assert tail == [(last.batch_id, "queued"), *[(pid, "queued") for pid in last.post_ids]]
    ledger.close()


def test_rows_streamed_into_a_table_are_all_or_nothing(any_ledger_url: str) -> None:
    """A stream of chunks is one statement's worth: a bad row in its last chunk leaves none of
    the chunks before it, and fails as any ledger write does."""
    ledger = Ledger(any_ledger_url)
    events = EventRecord.__table__  # type: ignore[attr-defined]

    def event_row(seq: int) -> dict[str, Any]:
        return {
            "month": MONTH,
            "seq": seq,
            "entity": EntityKind.POST,
            "entity_id": f"p{seq}",
            "from_status": None,
            "to_status": "pending",
            "why": "test",
            "at": utcnow(),
        }

    with (
        pytest.raises(IntegrityError),
        ledger.engine.begin() as connection,
        rows_into(connection, events) as insert_rows,
    ):
        insert_rows([event_row(seq) for seq in range(1, CHUNK + 1)])
        insert_rows([event_row(CHUNK + 1), event_row(1)])  # seq 1 again
    assert ledger.events(MONTH) == []
    ledger.close()


@sqlite_ledger_only
def test_a_batch_cycle_finds_its_rows_through_indexes(tmp_path: Any) -> None:
    """Each statement of one batch's life, run by SQLite's planner: none reads a whole table
    of the month (posts, batches, events) to find the batch's own rows."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.sync_posts(MONTH, month_of_posts(2_000), model="m", analysis=asked())
    ledger.plan(MONTH, max_posts=25, max_chars=10_000)
    with ledger.engine.begin() as connection:
        connection.execute(text("ANALYZE"))  # as a long-used ledger would have statistics

    with statements(ledger) as seen:
        ledger.count_in(MONTH, PostStatus.PENDING)  # the dispatch loop's look for work to plan
        settle_next_batch(ledger, MONTH)

    scans = []
    with ledger.engine.connect() as connection:
        for sql, parameters in seen:
            if not re.match(r"^\s*(SELECT|UPDATE|DELETE)\b", sql, re.IGNORECASE):
                continue
            rows = [parameters] if not isinstance(parameters, list) else parameters[:1]
            for row in rows:
                plan = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", row).fetchall()
                for step in plan:
                    detail = step[-1]
                    if re.match(r"SCAN (posts|batches|events)\b(?! USING)", detail):
                        scans.append(f"{detail}: {sql}")
    assert scans == []
    ledger.close()


def count_steps(connection: Any, counted: list[int]) -> None:
    """Add SQLite's virtual-machine steps (in hundreds) of what runs on `connection` (a
    sqlite3 connection) to `counted[0]`."""

    def count() -> int:
        counted[0] += 1
        return 0  # go on

    connection.set_progress_handler(count, 100)


@contextmanager
def sqlite_steps(ledger: Ledger) -> Iterator[list[int]]:
    """SQLite's virtual-machine steps (in hundreds) of every statement the ledger runs inside:
    the work the database does, whatever the machine's speed."""
    counted = [0]

    def watch(conn: Any, *_: Any) -> None:
        count_steps(conn.connection.driver_connection, counted)

    event.listen(ledger.engine, "before_cursor_execute", watch)
    try:
        yield counted
    finally:
        event.remove(ledger.engine, "before_cursor_execute", watch)


@sqlite_ledger_only
def test_a_batch_costs_the_database_the_same_in_a_small_and_in_a_big_month(tmp_path: Any) -> None:
    """One batch's life (the dispatch loop's look for work, intent, task id, output, decision)
    on a fresh ledger, which has no statistics: as many SQLite steps in a month of 20 000 posts
    as in one of 1 000, give or take. (A batch's posts were once found through the month's
    queued posts: 25 ms a batch at 100 000 posts.)"""
    steps = {}
    for n in (1_000, 20_000):
        ledger = Ledger(f"sqlite:///{tmp_path / f'ledger-{n}.db'}")
        ledger.sync_posts(MONTH, month_of_posts(n), model="m", analysis=asked())
        ledger.plan(MONTH, max_posts=25, max_chars=10_000)
        with sqlite_steps(ledger) as counted:
            ledger.count_in(MONTH, PostStatus.PENDING)
            settle_next_batch(ledger, MONTH)
        steps[n] = counted[0]
        ledger.close()
    assert steps[20_000] <= 1.5 * steps[1_000], steps


@sqlite_ledger_only
def test_planning_a_month_costs_the_database_in_proportion_to_its_posts(tmp_path: Any) -> None:
    """A plan's SQLite steps grow with the month, not with its square: a move into batches
    once joined each post to every batch's ids (a 100 000-post plan never ended)."""
    steps = {}
    for n in (1_000, 4_000):
        ledger = Ledger(f"sqlite:///{tmp_path / f'ledger-{n}.db'}")
        ledger.sync_posts(MONTH, month_of_posts(n), model="m", analysis=asked())
        with sqlite_steps(ledger) as counted:
            ledger.plan(MONTH, max_posts=25, max_chars=10_000)
        steps[n] = counted[0]
        ledger.close()
    assert steps[4_000] <= 6 * steps[1_000], steps  # 4x the posts; quadratic would be 16x


@sqlite_ledger_only
def test_status_reads_as_much_of_a_month_of_many_posts_as_of_few(tmp_path: Any) -> None:
    """`postledger status` and a run's progress bar (twice a second) read the month's post
    counts, not its posts: as many SQLite steps for 20 000 posts as for 1 000, give or take, in
    as many batches, three of them done. (Every post of the month was once counted at every
    look; a month's batches are still read, 4 000 at 100 000 posts.)"""
    import sqlite3

    from postledger.progress.status import progress, status
    from postledger.record.plain import Reader

    steps = {}
    for n in (1_000, 20_000):
        path = tmp_path / f"ledger-{n}.db"
        ledger = Ledger(f"sqlite:///{path}")
        ledger.sync_posts(MONTH, month_of_posts(n), model="m", analysis=asked())
        ledger.plan(MONTH, max_posts=n // 40, max_chars=1_000_000)
        for _ in range(3):
            settle_next_batch(ledger, MONTH)
        ledger.close()
        connection = sqlite3.connect(path)
        counted = [0]
        count_steps(connection, counted)
        reader = Reader(connection, postgres=False)
        report, light = status(reader, MONTH), progress(reader, MONTH)
        connection.close()
        assert report is not None and light is not None
        assert report["total"] == light["total"] == n
        assert report["completed"] == light["completed"] == 3 * n // 40
        assert report["batches"]["completed"] == 3 and report["batches"]["queued"] == 37
        steps[n] = counted[0]
    assert steps[20_000] <= 1.5 * steps[1_000], steps
