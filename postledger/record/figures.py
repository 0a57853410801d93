"""A month in numbers, counted and summed by the database in plain SQL (`plain.Reader`).

What `status`, the progress bar and the run's artifacts show: each figure is one query over
the month's rows that an index answers, never the rows themselves (a month holds 100 000
posts and 4 000 batches). The enums are stored by name, as the ORM stores them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from postledger.record.kinds import (
    RETRIED,
    Answer,
    BatchStatus,
    FailureKind,
    PostStatus,
    Question,
    SpendState,
)
from postledger.record.plain import Reader, stamped


@dataclass(frozen=True)
class SpendGroup:
    """Spend rows of one state, added up: by the database (`LedgerReads.spend_totals`) or
    one row at a time (`spend_summary`)."""

    state: SpendState
    amount: int  # the settled costs, and the estimates where no cost is known
    estimated: int
    rows: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0


def summed(groups: Iterable[SpendGroup]) -> dict[str, int]:
    """Totals of a month's charges, in micro-units and tokens. `possible` is an estimate:
    charges that may or may not have happened."""
    summary = {"confirmed": 0, "possible": 0, "wasted": 0}  # micro-units
    summary |= {"submissions": 0, "refunded_submissions": 0}  # counts
    summary |= {"input_tokens": 0, "output_tokens": 0}
    summary |= {"cached_input_tokens": 0, "cache_write_tokens": 0}
    for group in groups:
        summary["submissions"] += group.rows
        summary["input_tokens"] += group.input_tokens
        summary["output_tokens"] += group.output_tokens
        summary["cached_input_tokens"] += group.cached_input_tokens
        summary["cache_write_tokens"] += group.cache_write_tokens
        if group.state is SpendState.POSSIBLE:
            summary["possible"] += group.estimated
        elif group.state is SpendState.REFUNDED:
            summary["refunded_submissions"] += group.rows
        else:
            summary[group.state.value] += group.amount
    return summary


@dataclass(frozen=True)
class PostFigures:
    """A month's posts in numbers."""

    counts: dict[PostStatus, int]  # every state, zero included
    business_retries: int  # paid attempts beyond each post's first (R15)
    requeues: int  # unpaid returns to the queue


@dataclass(frozen=True)
class BatchFigures:
    """A month's batches in numbers."""

    counts: dict[BatchStatus, int]
    request_retries: int  # request-layer retries of every batch (R16)
    bisected: int  # batches whose unusable output was split in halves (R12)
    running: list[str]  # the ids of the running ones, in start order
    upstreams: frozenset[str]  # the breaker names of the upstreams its batches were sent to


@dataclass(frozen=True)
class FailureGroup:
    """The month's failed posts of one kind: how many, and the reason of the first."""

    kind: FailureKind | None
    posts: int
    first_reason: str | None


@dataclass(frozen=True)
class FailedPost:
    post_id: str
    kind: FailureKind | None
    attempts: int
    reason: str | None


@dataclass(frozen=True)
class AskedQuestion:
    """A question a run of the month put to a person, and how it ended (None: not yet)."""

    id: int
    kind: Question
    asked_at: datetime
    answer: Answer | None


def post_counts(reader: Reader, month: str) -> dict[PostStatus, int]:
    """How many of the month's posts are in each state (every state, zero included): the
    month's rows of the counts the state machine keeps (`postledger.record.post_counts`)."""
    rows = reader.rows("SELECT status, posts FROM post_counts WHERE month = ?", month)
    counts = {status: 0 for status in PostStatus}
    counts.update({PostStatus[name]: int(n) for name, n in rows})
    return counts


def post_figures(reader: Reader, month: str) -> PostFigures:
    """The month's posts in numbers: the kept counts, and the retries summed over the few
    posts that had one (the partial index `ix_posts_retried` holds just those)."""
    business, requeues = reader.one(
        "SELECT sum(CASE WHEN attempts > 1 THEN attempts - 1 ELSE 0 END), sum(requeues) "
        f"FROM posts WHERE month = ? AND ({RETRIED})",
        month,
    )
    return PostFigures(
        post_counts(reader, month),
        business_retries=int(business or 0),
        requeues=int(requeues or 0),
    )


def failure_groups(reader: Reader, month: str) -> list[FailureGroup]:
    """The month's failed posts by kind, the most common first (ties: the kind that failed
    first in file order)."""
    rows = reader.rows(
        "SELECT failure_kind, n, failure_reason FROM ("
        " SELECT failure_kind, failure_reason, position,"
        "  count(*) OVER (PARTITION BY failure_kind) AS n,"
        "  row_number() OVER (PARTITION BY failure_kind ORDER BY position) AS nth"
        " FROM posts WHERE month = ? AND status = ?"
        ") AS failed WHERE nth = 1 ORDER BY n DESC, position",
        month,
        PostStatus.FAILED.name,
    )
    return [FailureGroup(_kind(kind), int(n), reason) for kind, n, reason in rows]


def failed_posts(reader: Reader, month: str) -> list[FailedPost]:
    """Every failed post of the month, in file order."""
    rows = reader.rows(
        "SELECT post_id, failure_kind, attempts, failure_reason FROM posts "
        "WHERE month = ? AND status = ? ORDER BY position",
        month,
        PostStatus.FAILED.name,
    )
    return [FailedPost(post, _kind(kind), int(n), reason) for post, kind, n, reason in rows]


def batch_figures(reader: Reader, month: str) -> BatchFigures:
    counts = reader.rows(
        "SELECT status, count(*) FROM batches WHERE month = ? GROUP BY status", month
    )
    retries, bisected = reader.one(
        "SELECT coalesce(sum(request_retries), 0), count(DISTINCT split_from) FROM batches "
        "WHERE month = ?",
        month,
    )
    running = reader.rows(
        "SELECT batch_id FROM batches WHERE month = ? AND status = ? ORDER BY seq",
        month,
        BatchStatus.RUNNING.name,
    )
    upstreams = reader.rows(
        "SELECT DISTINCT upstream FROM batches WHERE month = ? AND upstream IS NOT NULL", month
    )
    return BatchFigures(
        counts={BatchStatus[name]: int(n) for name, n in counts},
        request_retries=int(retries),
        bisected=int(bisected),
        running=[batch_id for (batch_id,) in running],
        upstreams=frozenset(upstream for (upstream,) in upstreams),
    )


def forecast_total(reader: Reader, month: str) -> int | None:
    """What the month should cost in all, as its latest run forecast it (None: no forecast
    kept, or no price)."""
    row = reader.rows("SELECT total FROM forecasts WHERE month = ?", month)
    return int(row[0][0]) if row and row[0][0] is not None else None


def spend_totals(reader: Reader, month: str) -> dict[str, int]:
    """The month's spend as `postledger.guards.charges.spend_summary` says it of the same rows
    (confirmed, possible and wasted micro-units, submissions, refunded ones, tokens)."""
    rows = reader.rows(
        "SELECT state, sum(coalesce(cost, estimated_cost, 0)), sum(coalesce(estimated_cost, 0)),"
        " count(*), sum(coalesce(input_tokens, 0)), sum(coalesce(output_tokens, 0)),"
        " sum(coalesce(cached_input_tokens, 0)), sum(coalesce(cache_write_tokens, 0)) "
        "FROM spend WHERE month = ? GROUP BY state",
        month,
    )
    return summed(
        SpendGroup(SpendState[row[0]], *(int(value or 0) for value in row[1:])) for row in rows
    )


def breaker_events(reader: Reader, month: str) -> int:
    """How many breaker events runs of the month caused or answered."""
    (n,) = reader.one("SELECT count(*) FROM breaker_events WHERE month = ?", month)
    return int(n)


def questions(reader: Reader, month: str) -> list[AskedQuestion]:
    """Every question runs of the month asked, in the order asked."""
    rows = reader.rows(
        "SELECT id, kind, asked_at, answer FROM approvals WHERE month = ? ORDER BY id", month
    )
    return [
        AskedQuestion(int(id_), Question[kind], stamped(at), Answer[answer] if answer else None)
        for id_, kind, at, answer in rows
    ]


def _kind(name: str | None) -> FailureKind | None:
    return FailureKind[name] if name else None
