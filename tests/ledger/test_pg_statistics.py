"""On PostgreSQL, a month's posts copied in at once are analyzed before they are read: a
chunk's posts are then looked up by their key, not found by reading the whole month. Without
that, a million-post month took 48 minutes, each settle of a chunk scanning the month."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from postledger.batches.posts import Post
from postledger.ledger import Ledger
from postledger.record.db import REFRESH_STATISTICS_AFTER
from tests.support.ledgers import asked

MONTH = "2026-10"
POSTS = REFRESH_STATISTICS_AFTER + 2_000


def _plan(ledger: Ledger, ids: list[str]) -> str:
    """How PostgreSQL reads these posts of the month, as a chunk's settle reads them."""
    with ledger.engine.connect() as connection:
        rows = connection.execute(
            text(
                "EXPLAIN SELECT post_id, status FROM posts"
                " WHERE month = :month AND post_id = ANY(:ids)"
            ),
            {"month": MONTH, "ids": ids},
        )
        return "\n".join(str(row[0]) for row in rows)


def _analyzed(ledger: Ledger) -> Any:
    with ledger.engine.connect() as connection:
        return connection.execute(
            text("SELECT reltuples FROM pg_class WHERE relname = 'posts'")
        ).scalar_one()


def test_a_month_copied_in_is_analyzed_and_its_posts_read_by_key(pg_ledger_url: str) -> None:
    ledger = Ledger(pg_ledger_url)
    assert _analyzed(ledger) < 1  # never analyzed: PostgreSQL says -1 (0 before version 14)
    posts = [Post(f"p{i:06d}", f"post {i}: the app is slow", i + 1) for i in range(POSTS)]
    ledger.sync_posts(MONTH, posts, model="m", analysis=asked())

    assert _analyzed(ledger) >= POSTS * 0.9  # the statistics know the month's posts
    chunk = [f"p{i:06d}" for i in range(5_000, 5_250)]  # a chunk of ten batches
    plan = _plan(ledger, chunk)
    looked_up = "posts_pkey" in plan and "post_id" in plan.split("Index Cond")[-1]
    assert looked_up, plan[:300]
    ledger.close()
