"""A submission's bookkeeping in bulk (`Ledger.mark_running_many`, `save_outputs`,
`finish_outputs`) leaves the ledger as the per-batch path does (`mark_running`, `save_output`,
`finish_from_output`): the same statuses, attempts, results, charges, kept counts and events,
batch by batch and post by post. Two months of the same posts on one ledger (SQLite, or
PostgreSQL in the suite's second pass), one through each path, are compared row by row."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
from sqlalchemy import event as sql_event
from sqlmodel import Session, col, select

from postledger.batches.posts import Post
from postledger.defaults import Price
from postledger.guards.breaker import BreakerHeld, Signal
from postledger.guards.charges import BudgetHeld
from postledger.ledger import Ledger, Started
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    BreakerLevel,
    PostCountRecord,
    PostStatus,
    SpendRecord,
    SubmissionRecord,
)
from postledger.record.month_lease import MonthLost
from postledger.recovery.interrupted import finish_from_output
from postledger.settings import Limits
from tests.support.ledgers import asked, billed, priced

ONE, BULK = "2026-10", "2026-11"  # the per-batch path's month, and the bulk path's
PRICE = Price(input=150_000, output=600_000)
UPSTREAM = "sim-batch"
ANALYSIS = asked()
LIMITS = Limits(max_attempts=3, max_requeues=5)


def plan(ledger: Ledger, month: str, posts: int = 40, special: bool = False) -> list[str]:
    """`posts` posts in batches of five, queued; their batch ids in start order. `special`:
    ids and texts that a PostgreSQL array written as text must quote or escape."""
    texts = [
        Post(f"p{i:02d}", f"post number {i}", i + 1)
        if not special
        else Post(special_id(i), f"post {SPECIALS[-i % len(SPECIALS)]} {i}", i + 1)
        for i in range(posts)
    ]
    ledger.sync_posts(month, texts, model="m", analysis=ANALYSIS)
    ledger.plan(month, max_posts=5, max_chars=10_000)
    return [b.batch_id for b in ledger.batches(month)]


def output(batch: BatchRecord, shape: str) -> str:
    """A batch's raw output: every item valid, one item invalid, or no JSON at all."""
    items = [
        {"id": pid, "category": "question", "sentiment": "neutral", "summary": "s"}
        for pid, _ in batch.request or []
    ]
    if shape == "one_invalid":
        items[0]["sentiment"] = "ecstatic"
    return "not json" if shape == "unusable" else json.dumps(items)


# What an array literal quotes or escapes: on PostgreSQL a chunk's ids and values are array
# parameters, and the driver must send each as it is (text or binary).
SPECIALS = ['"', "\\", "{", "}", ",", " ", "NULL", "é\u2028", "'", "\t"]


def special_id(i: int) -> str:
    return SPECIALS[i % len(SPECIALS)] + f"{i:02d}"


# The lines of a job: most valid, one with an invalid item (a retry), one unusable (a split).
SHAPES = ["valid", "one_invalid", "valid", "unusable", "valid", "valid", "valid", "valid"]
USAGE = {"prompt_tokens": 120, "completion_tokens": 80}
MARKING: dict[str, Any] = {
    "upstream": UPSTREAM,
    "idempotent": False,
    "pricing": priced(PRICE),
    "max_attempts": 3,
}


def settle_one_at_a_time(ledger: Ledger, ids: list[str]) -> None:
    batches = [started(ledger.mark_running(batch_id, **MARKING)) for batch_id in ids]
    submit(ledger, ONE, ids)
    for batch, shape in zip(batches, SHAPES, strict=True):
        ledger.save_output(batch.batch_id, output(batch, shape), USAGE, billed(PRICE))
        finish_from_output(ledger, batch.batch_id, ANALYSIS, LIMITS, UPSTREAM)


def started(marked: Started | BreakerHeld | BudgetHeld) -> BatchRecord:
    assert isinstance(marked, Started), marked
    return marked.batch


def settle_in_bulk(ledger: Ledger, ids: list[str]) -> None:
    batches, held = ledger.mark_running_many(ids, **MARKING)
    assert held is None and [b.batch_id for b in batches] == ids
    submit(ledger, BULK, ids)
    outputs = [
        (b.batch_id, output(b, shape), USAGE) for b, shape in zip(batches, SHAPES, strict=True)
    ]
    ledger.save_outputs(outputs, billed(PRICE))
    assert {b.status for b in ledger.batches(BULK) if b.batch_id in ids} == {BatchStatus.RECEIVED}
    decisions = ledger.finish_outputs(ids, ANALYSIS, LIMITS, UPSTREAM)
    assert [d.batch_to for d in decisions] == [
        BatchStatus.FAILED if shape == "unusable" else BatchStatus.COMPLETED for shape in SHAPES
    ]


def submit(ledger: Ledger, month: str, ids: list[str]) -> None:
    ledger.record_submission(
        SubmissionRecord(
            submission_id=f"{month}-s1",
            month=month,
            idempotency_key="k",
            batch_ids=ids,
            metadata_sent={},
        )
    )


def first_estimate(ledger: Ledger) -> int:
    with Session(ledger.engine) as session:
        (row,) = session.exec(select(SpendRecord).where(SpendRecord.month == BULK))
        assert row.estimated_cost is not None
        return row.estimated_cost


def same(month: str, value: Any) -> Any:
    """`value` with the month's own names (its batches', its submission's) made the same."""
    return json.loads(json.dumps(value, default=str).replace(month, "M"))


def state_of(ledger: Ledger, month: str) -> dict[str, Any]:
    """Everything the bookkeeping wrote of the month, with what differs by nature (stamps,
    the order events of different records were numbered in) left out."""
    events: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for event in ledger.events(month):
        row = (event.entity, event.from_status, event.to_status, event.why)
        events[event.entity_id].append(row)
    posts = {
        p.post_id: (p.status, p.attempts, p.result, p.failure_kind, p.batch_id, p.split)
        for p in ledger.posts(month)
    }
    batches = {
        b.batch_id: (
            b.status,
            b.sends,
            b.charge,
            b.request,
            b.raw_output,
            b.usage,
            b.upstream,
            b.submission_id,
            b.failure_kind,
            b.split_from,
            b.started_at is not None,
            b.finished_at is not None,
        )
        for b in ledger.batches(month)
    }
    with Session(ledger.engine) as session:
        spend = [
            (s.batch_id, s.send, s.state, s.cost, s.estimated_cost, s.input_tokens)
            for s in session.exec(
                select(SpendRecord).where(SpendRecord.month == month).order_by(col(SpendRecord.id))
            )
        ]
        counts = {
            c.status: c.posts
            for c in session.exec(select(PostCountRecord).where(PostCountRecord.month == month))
            if c.posts
        }
    kept: dict[str, Any] = same(
        month, {"events": events, "posts": posts, "batches": batches, "spend": spend}
    )
    return kept | {"counts": {str(status): n for status, n in counts.items()}}


def test_bulk_bookkeeping_leaves_what_the_per_batch_path_leaves(ledger: Ledger) -> None:
    settle_one_at_a_time(ledger, plan(ledger, ONE))
    settle_in_bulk(ledger, plan(ledger, BULK))

    one, bulk = state_of(ledger, ONE), state_of(ledger, BULK)
    assert bulk == one
    # What the job's lines came to: one post retried, one batch split in two, the rest done.
    assert one["counts"] == {"completed": 34, "pending": 1, "queued": 5}
    # Events are numbered without gaps, however many each transaction logged.
    assert [e.seq for e in ledger.events(BULK)] == list(range(1, len(ledger.events(BULK)) + 1))


def test_ids_and_texts_that_arrays_escape_arrive_as_they_were_written(ledger: Ledger) -> None:
    settle_one_at_a_time(ledger, plan(ledger, ONE, special=True))
    settle_in_bulk(ledger, plan(ledger, BULK, special=True))

    one, bulk = state_of(ledger, ONE), state_of(ledger, BULK)
    assert bulk == one
    assert bulk["counts"] == {"completed": 34, "pending": 1, "queued": 5}
    ids = {p.post_id for p in ledger.posts(BULK)}
    assert ids == {special_id(i) for i in range(40)}
    sent = {pid: text for b in ledger.batches(BULK) for pid, text in b.request or []}
    assert sent["NULL06"] == f"post {SPECIALS[-6]} 6" and sent["\\01"] == f"post {SPECIALS[-1]} 1"
    done = [p for p in ledger.posts(BULK) if p.status is PostStatus.COMPLETED]
    assert len(done) == 34 and all(p.result and p.result["category"] == "question" for p in done)


def test_the_bulk_paths_statements_do_not_grow_with_the_chunk(ledger: Ledger) -> None:
    """A chunk of 80 posts is marked, saved and finished by the statements a chunk of 40
    was: none lists the chunk's ids one parameter each. (SQLite's driver keeps each distinct
    statement compiled with its values: one per chunk size held tens of MB.)"""
    seen: dict[int, set[str]] = {}
    for size, month in ((40, ONE), (80, BULK)):
        ids = plan(ledger, month, posts=size)
        statements: set[str] = set()

        def keep(*args: Any, into: set[str] = statements) -> None:
            into.add(args[2])

        sql_event.listen(ledger.engine, "before_cursor_execute", keep)
        batches, _ = ledger.mark_running_many(ids, **MARKING)
        submit(ledger, month, ids)
        ledger.save_outputs([(b.batch_id, output(b, "valid"), USAGE) for b in batches])
        ledger.finish_outputs(ids, ANALYSIS, LIMITS, UPSTREAM)
        sql_event.remove(ledger.engine, "before_cursor_execute", keep)
        seen[size] = {s.replace(month, "M") for s in statements}
    assert seen[80] <= seen[40]  # (the first chunk also made the upstream's breaker)
    assert {PostStatus.COMPLETED} == {p.status for p in ledger.posts(BULK)}


def test_marking_in_bulk_stops_at_the_first_batch_the_budget_holds(ledger: Ledger) -> None:
    ids = plan(ledger, BULK)
    first = started(ledger.mark_running(ids[0], **MARKING))  # one batch's estimate, booked
    estimated = first_estimate(ledger)
    assert first.status is BatchStatus.RUNNING and estimated > 0
    # Room for two more batches like it, not three.
    batches, held = ledger.mark_running_many(ids[1:], **MARKING, max_cost=3 * estimated)
    assert [b.batch_id for b in batches] == ids[1:3]
    assert isinstance(held, BudgetHeld)
    queued = [b.batch_id for b in ledger.batches(BULK, BatchStatus.QUEUED)]
    assert queued == ids[3:]  # the one held, and every one after it: nothing booked for them
    assert {p.status for p in ledger.posts(BULK) if p.batch_id in queued} == {PostStatus.QUEUED}
    assert {p.attempts for p in ledger.posts(BULK) if p.batch_id in queued} == {0}


def test_marking_in_bulk_stops_where_the_job_is_full(ledger: Ledger) -> None:
    ids = plan(ledger, BULK)

    class TwoBatches:
        taken: list[str] = []

        def fits(self) -> bool:
            return len(self.taken) < 2

        def took(self, batch: BatchRecord) -> None:
            assert batch.request is not None  # its request is kept before it is counted
            self.taken.append(batch.batch_id)

    batches, held = ledger.mark_running_many(ids, **MARKING, room=TwoBatches())
    assert held is None and [b.batch_id for b in batches] == ids[:2]
    assert [b.batch_id for b in ledger.batches(BULK, BatchStatus.RUNNING)] == ids[:2]


def test_in_probe_a_bulk_marking_starts_one_batch_and_an_open_breaker_none(
    ledger: Ledger,
) -> None:
    ids = plan(ledger, BULK)
    ledger.leases.claim(BULK, "run-1")
    ledger.approvals.signal(UPSTREAM, Signal.TRANSPORT_FAILURE, "b1 failed", month=BULK)
    assert ledger.approvals.breaker(UPSTREAM).level is BreakerLevel.PROBE
    batches, held = ledger.mark_running_many(ids, **MARKING, holder="run-1")
    assert [b.batch_id for b in batches] == ids[:1]  # the one probe, across the chunk
    assert isinstance(held, BreakerHeld) and "probing" in held.reason

    ledger.approvals.signal(UPSTREAM, Signal.TRANSPORT_FAILURE, "b2 failed", month=BULK)
    batches, held = ledger.mark_running_many(ids[1:], **MARKING, holder="run-1")
    assert batches == [] and isinstance(held, BreakerHeld) and "open" in held.reason
    assert [b.batch_id for b in ledger.batches(BULK, BatchStatus.QUEUED)] == ids[1:]


def test_a_run_that_lost_its_month_marks_and_saves_nothing(ledger: Ledger) -> None:
    ids = plan(ledger, BULK)
    with pytest.raises(MonthLost):
        ledger.mark_running_many(ids, **MARKING, holder="a run that never held it")
    assert {b.status for b in ledger.batches(BULK)} == {BatchStatus.QUEUED}
    batches, _ = ledger.mark_running_many(ids, **MARKING)
    outputs = [(b.batch_id, output(b, "valid"), USAGE) for b in batches]
    with pytest.raises(MonthLost):
        ledger.save_outputs(outputs, billed(PRICE), holder="a run that never held it")
    with pytest.raises(MonthLost):
        ledger.finish_outputs(ids, ANALYSIS, LIMITS, UPSTREAM, holder="nor this one")
    assert {b.status for b in ledger.batches(BULK)} == {BatchStatus.RUNNING}
    assert all(b.raw_output is None for b in ledger.batches(BULK))
