"""What the ledger has seen of past paid work, for a forecast (`postledger.progress.forecast`):
the tokens its confirmed answers used against the characters they were asked about, how long
a batch or a job took, and what is left to send of a month. Plain SQL (`Reader`), no ORM:
`postledger estimate` answers without loading either.

Only batches that completed count as history: their posts are still theirs (a batch split in
two gave its posts to its halves, and a failed one may hold posts that were never answered).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from postledger.record.kinds import BatchStatus, PostStatus, SpendState
from postledger.record.plain import Reader, stamped

# A post still to send: not in flight, not ended.
LEFT = (PostStatus.PENDING, PostStatus.QUEUED, PostStatus.WAITING)


@dataclass(frozen=True)
class UsageSeen:
    """The confirmed usage of completed batches, in all, and what they asked about."""

    batches: int
    posts: int
    post_chars: int
    input_tokens: int  # every class: fresh, read from the cache, written to it
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int


def usage_seen(reader: Reader, upstream: str | None = None, model: str | None = None) -> UsageSeen:
    """Every month's confirmed usage of completed batches (sent to `upstream`, answered by
    `model`, where given)."""
    where, params = _confirmed("b.status IN (?) AND s.input_tokens IS NOT NULL", upstream, model)
    params.insert(0, BatchStatus.COMPLETED.name)
    tokens = reader.one(
        "SELECT count(DISTINCT b.batch_id), sum(s.input_tokens),"
        " sum(coalesce(s.cached_input_tokens, 0)), sum(coalesce(s.cache_write_tokens, 0)),"
        " sum(s.output_tokens) FROM spend s JOIN batches b ON b.batch_id = s.batch_id"
        f" WHERE {where}",
        *params,
    )
    # The posts read once, each looked up in the set of those batches (posts have no index
    # by batch: joined the other way, a month of 100 000 took minutes on SQLite).
    asked = reader.one(
        "SELECT count(*), sum(length(p.text)) FROM posts p WHERE p.batch_id IN"
        f" (SELECT b.batch_id FROM spend s JOIN batches b ON b.batch_id = s.batch_id"
        f" WHERE {where})",
        *params,
    )
    fresh, cached, written = (int(value or 0) for value in tokens[1:4])
    return UsageSeen(
        batches=int(tokens[0] or 0),
        posts=int(asked[0] or 0),
        post_chars=int(asked[1] or 0),
        input_tokens=fresh + cached + written,
        cached_input_tokens=cached,
        cache_write_tokens=written,
        output_tokens=int(tokens[4] or 0),
    )


def sends_seen(reader: Reader, model: str, limit: int) -> list[tuple[int, int, int, int]]:
    """The `limit` latest confirmed sends to `model` whose usage and asking are known: (input
    tokens of every class, output tokens, characters asked, posts asked), newest first."""
    rows = reader.rows(
        "SELECT input_tokens + coalesce(cached_input_tokens, 0) + coalesce(cache_write_tokens, 0),"
        " output_tokens, asked_chars, asked_posts FROM spend WHERE model = ? AND state = ?"
        " AND input_tokens IS NOT NULL AND output_tokens IS NOT NULL"
        " AND asked_chars IS NOT NULL AND asked_posts IS NOT NULL"
        " ORDER BY id DESC LIMIT ?",
        model,
        SpendState.CONFIRMED.name,
        limit,
    )
    return [(int(a), int(b), int(c), int(d)) for a, b, c, d in rows]


@dataclass(frozen=True)
class Shortfalls:
    """How the budget's per-batch estimates, made before each call, compared with what the
    answers then cost: how many fell short, and by how much at most (micro-units and a share
    of the cost)."""

    settled: int  # confirmed charges with both an estimate and a cost
    short: int
    worst: int  # micro-units
    worst_share: float  # of that charge's cost


def shortfalls(reader: Reader, upstream: str | None = None, model: str | None = None) -> Shortfalls:
    """Every confirmed charge's estimate against its cost (sent to `upstream`, answered by
    `model`, where given)."""
    condition = "s.cost IS NOT NULL AND s.estimated_cost IS NOT NULL"
    where, params = _confirmed(condition, upstream, model)
    rows = reader.rows(
        "SELECT s.estimated_cost, s.cost FROM spend s JOIN batches b ON b.batch_id = s.batch_id"
        f" WHERE {where} AND s.cost > s.estimated_cost",
        *params,
    )
    (settled,) = reader.one(
        f"SELECT count(*) FROM spend s JOIN batches b ON b.batch_id = s.batch_id WHERE {where}",
        *params,
    )
    gaps = [(cost - estimated, (cost - estimated) / cost) for estimated, cost in rows if cost]
    worst = max(gaps, default=(0, 0.0))
    return Shortfalls(int(settled or 0), len(rows), worst[0], worst[1])


def batch_seconds(reader: Reader, upstream: str) -> list[float]:
    """How long each completed batch sent to `upstream` took, from its mark to its end (the
    last 1 000)."""
    rows = reader.rows(
        "SELECT started_at, finished_at FROM batches WHERE upstream = ? AND status = ?"
        " AND started_at IS NOT NULL AND finished_at IS NOT NULL"
        " ORDER BY finished_at DESC LIMIT 1000",
        upstream,
        BatchStatus.COMPLETED.name,
    )
    return [_seconds(started, finished) for started, finished in rows]


def job_seconds(reader: Reader, upstream: str) -> list[float]:
    """How long each Batch API job sent to `upstream` took, from its submission to its last
    batch's end (the last 100)."""
    rows = reader.rows(
        "SELECT s.created_at, max(b.finished_at) FROM submissions s JOIN batches b"
        " ON b.submission_id = s.submission_id WHERE b.upstream = ? AND b.status IN (?)"
        " AND b.finished_at IS NOT NULL GROUP BY s.submission_id, s.created_at"
        " ORDER BY s.created_at DESC LIMIT 100",
        upstream,
        BatchStatus.COMPLETED.name,
    )
    return [_seconds(created, finished) for created, finished in rows]


def left_sizes(reader: Reader, month: str) -> Iterator[tuple[str, int]]:
    """The month's posts still to send, in the order they are planned: (id, characters), a
    chunk at a time (a million of them held at once were ~150 MB of the run's peak)."""
    marks = ", ".join("?" for _ in LEFT)
    rows = reader.stream(
        f"SELECT post_id, length(text) FROM posts WHERE month = ? AND status IN ({marks})"
        " ORDER BY position",
        month,
        *(status.name for status in LEFT),
    )
    return ((post_id, int(chars)) for post_id, chars in rows)


def post_states(reader: Reader, month: str) -> dict[str, bool]:
    """Each of the month's posts the ledger knows: whether it is still to send."""
    left = {status.name for status in LEFT}
    rows = reader.rows("SELECT post_id, status FROM posts WHERE month = ?", month)
    return {post_id: status in left for post_id, status in rows}


def _confirmed(condition: str, upstream: str | None, model: str | None) -> tuple[str, list[object]]:
    """The WHERE of confirmed spend rows `s` of batches `b` meeting `condition` (sent to
    `upstream`, answered by `model`, where given), and its parameters after the condition's
    own."""
    where = f"{condition} AND s.state = ?"
    params: list[object] = [SpendState.CONFIRMED.name]
    if upstream is not None:
        where += " AND b.upstream = ?"
        params.append(upstream)
    if model is not None:
        where += " AND s.model = ?"
        params.append(model)
    return where, params


def _seconds(start: datetime | str, end: datetime | str) -> float:
    return max(0.0, (stamped(end) - stamped(start)).total_seconds())
