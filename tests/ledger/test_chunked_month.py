"""A month synced and planned a few posts at a time gives the ledger it gives in one piece: the
same posts, batches and events (a month of a million posts is never held whole, so every step
of it is cut into chunks; `SYNC_CHUNK`, `PLAN_CHUNK`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from postledger.batches import intake, planning
from postledger.batches.posts import InputError, Post, check_posts, read_posts
from postledger.ledger import Ledger
from tests.support.ledgers import asked
from tests.support.months import write_jsonl

CUT, WHOLE = "2026-10", "2026-11"  # the same file, as two months of one ledger


def lines(n: int, *, changed: frozenset[int] = frozenset(), moved: bool = False) -> list[str]:
    """`n` posts of varied lengths (every 13th too long for a batch), some with fields."""
    posts = []
    for i in range(n):
        body = "x" * (5 + (i * 7) % 40) if i % 13 else "y" * 500
        item: dict[str, Any] = {"id": f"p{i:03d}", "text": f"{i} {body}"}
        if i in changed:
            item["text"] += " (edited)"
        if i % 5 == 0:
            item["source"] = "forum" if not changed or i % 10 else "app"
        posts.append(json.dumps(item))
    if moved:
        posts[3], posts[4] = posts[4], posts[3]
    return posts


def month_steps(ledger: Ledger, month: str, path: Path) -> list[tuple[int, int, int]]:
    """Sync the file, plan it; the sync's counts."""
    synced = ledger.sync_posts(month, read_posts(check_posts(path)), model="m", analysis=asked())
    ledger.plan(month, max_posts=4, max_chars=120, keep_batches=False)
    return [(synced.new, synced.unchanged, synced.changed)]


def contents(ledger: Ledger, month: str) -> dict[str, list[tuple[Any, ...]]]:
    """The month's rows, without what differs by nature between two months (the month's own
    name in ids, timestamps, idempotency keys)."""
    queries = {
        "posts": "SELECT post_id, position, text, fields, fingerprint, status, attempts, "
        "batch_id, failure_kind, failure_reason FROM posts WHERE month = :m ORDER BY post_id",
        "batches": "SELECT seq, post_ids, status, sends FROM batches WHERE month = :m ORDER BY seq",
        "events": "SELECT seq, entity, entity_id, from_status, to_status, why FROM events "
        "WHERE month = :m ORDER BY seq",
        "counts": "SELECT status, posts FROM post_counts WHERE month = :m ORDER BY status",
    }
    with ledger.engine.connect() as connection:
        found = {
            name: [tuple(row) for row in connection.execute(text(sql), {"m": month})]
            for name, sql in queries.items()
        }
    named: dict[str, list[tuple[Any, ...]]] = json.loads(
        json.dumps(found, default=str).replace(month, "M")
    )
    return named


def histories(events: list[tuple[Any, ...]]) -> dict[tuple[str, str], list[Any]]:
    """Each post's and batch's events, in the order they were logged."""
    found: dict[tuple[str, str], list[Any]] = {}
    for _, entity, entity_id, *move in events:
        found.setdefault((entity, entity_id), []).append(move)
    return found


def test_a_month_cut_in_chunks_is_the_month_in_one_piece(
    any_ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(any_ledger_url)
    first = write_jsonl(tmp_path / "first.jsonl", lines(60))
    # A second run: posts edited, two swapped, their fields changed, new posts at the end.
    edited = frozenset({2, 10, 31})
    second = write_jsonl(tmp_path / "second.jsonl", lines(75, changed=edited, moved=True))

    whole = month_steps(ledger, WHOLE, first) + month_steps(ledger, WHOLE, second)
    monkeypatch.setattr(intake, "SYNC_CHUNK", 7)
    monkeypatch.setattr(planning, "PLAN_CHUNK", 7)
    cut = month_steps(ledger, CUT, first) + month_steps(ledger, CUT, second)

    assert cut == whole == [(60, 0, 0), (15, 57, 3)]
    in_one_piece, in_chunks = contents(ledger, WHOLE), contents(ledger, CUT)
    assert in_chunks["posts"] == in_one_piece["posts"]
    assert in_chunks["batches"] == in_one_piece["batches"]
    assert in_chunks["counts"] == in_one_piece["counts"]
    # The same events of every post and batch, each one's in the same order; the month's log
    # interleaves them a chunk at a time, numbered without a gap.
    assert histories(in_chunks["events"]) == histories(in_one_piece["events"])
    for events in (in_chunks["events"], in_one_piece["events"]):
        assert [e[0] for e in events] == list(range(1, len(events) + 1))
    # Posts too long for a batch failed; every other post of both files is in a batch.
    statuses = {row[5] for row in in_chunks["posts"]}
    assert statuses == {"QUEUED", "FAILED"}
    ledger.close()


def test_a_file_bad_on_the_way_leaves_the_ledger_as_it_was(
    any_ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sync reads its posts a chunk at a time in one transaction: a read that fails after
    chunks were written (a file changed under it) writes nothing of them."""
    monkeypatch.setattr(intake, "SYNC_CHUNK", 7)
    ledger = Ledger(any_ledger_url)
    ledger.sync_posts(CUT, [Post("a", "hello", 1)], model="m", analysis=asked())
    pulled: list[int] = []

    def posts() -> Any:
        for i in range(30):
            pulled.append(i)
            yield Post(f"p{i}", f"post {i}", i + 2)
        raise InputError("posts.jsonl", [])

    before = contents(ledger, CUT)
    with pytest.raises(InputError):
        ledger.sync_posts(CUT, posts(), model="m", analysis=asked())
    assert len(pulled) == 30
    assert contents(ledger, CUT) == before
    ledger.close()
