"""Rows a read command shows as they are, read in plain SQL (`plain.Reader`): the breakers and
their history, the questions that wait for a person, a month's interrupted batches, and what
its report shows (each post, each charge, each paid batch's request).

`postledger breaker`, `plan` and `report` read these without importing the ORM, as `status`
reads `figures.py`; a run reads the same rows through its own engine (`LedgerReads.plain`), so
what a command shows and what a run decides come from one query each.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from postledger.record.claims import alive_elsewhere
from postledger.record.kinds import (
    BatchStatus,
    BreakerLevel,
    EntityKind,
    FailureKind,
    PostStatus,
    SpendState,
)
from postledger.record.plain import Reader, stamped

# A query's parameters are bounded: a batch's posts are looked up this many ids at a time.
_IDS_PER_QUERY = 500


@dataclass(frozen=True)
class Breaker:
    """The breaker of one upstream as the ledger holds it (R18, R19)."""

    upstream: str
    level: BreakerLevel
    failures: int  # final transport failures in a row
    reason: str | None
    changed_at: datetime


@dataclass(frozen=True)
class BreakerMove:
    """One event of a breaker's history: a change of level, or a person's answer."""

    at: datetime
    month: str | None
    from_level: BreakerLevel
    to_level: BreakerLevel
    why: str


@dataclass(frozen=True)
class OpenQuestion:
    """A question a run asked a person that nobody answered yet."""

    month: str
    upstream: str
    asked_at: datetime
    flow_run_id: str | None


@dataclass(frozen=True)
class InterruptedBatch:
    """A batch an earlier run sent and did not finish (`running` or `received`), with the posts
    that are in it now (a post changed since has left it). `in_flight`: not interrupted after
    all, the live run that holds the month sent it and still handles it."""

    batch_id: str
    seq: int
    status: BatchStatus
    request: list[list[str]] | None  # [[post id, text], ...] as first sent
    raw_output: str | None
    upstream_task_id: str | None
    sends: int
    post_ids: list[str]
    in_flight: bool = False


def breakers(reader: Reader) -> list[Breaker]:
    """Every breaker the ledger holds, by upstream name."""
    rows = reader.rows(
        "SELECT upstream, level, failures, reason, changed_at FROM breakers ORDER BY upstream"
    )
    return [
        Breaker(upstream, BreakerLevel[level], int(failures), reason, stamped(changed))
        for upstream, level, failures, reason, changed in rows
    ]


def breaker_history(reader: Reader, upstream: str, limit: int = 20) -> list[BreakerMove]:
    """The latest `limit` events of the upstream's breaker, oldest first."""
    rows = reader.rows(
        "SELECT at, month, from_level, to_level, why FROM breaker_events WHERE upstream = ? "
        "ORDER BY id DESC LIMIT ?",
        upstream,
        limit,
    )
    return [
        BreakerMove(stamped(at), month, BreakerLevel[from_], BreakerLevel[to], why)
        for at, month, from_, to, why in reversed(rows)
    ]


def open_questions(reader: Reader) -> list[OpenQuestion]:
    """Every unanswered question of every month, in the order asked."""
    rows = reader.rows(
        "SELECT month, upstream, asked_at, flow_run_id FROM approvals WHERE answer IS NULL "
        "ORDER BY id"
    )
    return [OpenQuestion(month, upstream, stamped(at), run) for month, upstream, at, run in rows]


def knows_month(reader: Reader, month: str) -> bool:
    """Whether any post of the month was ever synced (a run of it has started)."""
    return bool(reader.rows("SELECT 1 FROM posts WHERE month = ? LIMIT 1", month))


def interrupted(reader: Reader, month: str) -> list[InterruptedBatch]:
    """The month's `running` and `received` batches in start order, each with its posts now,
    and whether the live run that holds the month has it in flight."""
    live = live_holder(reader, month)
    rows = reader.rows(
        "SELECT batch_id, seq, status, request, raw_output, upstream_task_id, sends, post_ids, "
        "sent_by FROM batches WHERE month = ? AND status IN (?, ?) ORDER BY seq",
        month,
        BatchStatus.RUNNING.name,
        BatchStatus.RECEIVED.name,
    )
    return [
        InterruptedBatch(
            batch_id,
            int(seq),
            BatchStatus[status],
            _json(request),
            raw_output,
            task_id,
            int(sends),
            _members(reader, month, batch_id, _json(post_ids)),
            in_flight=live is not None and sent_by == live,
        )
        for batch_id, seq, status, request, raw_output, task_id, sends, post_ids, sent_by in rows
    ]


def live_holder(reader: Reader, month: str) -> str | None:
    """The run that holds the month if it is alive and of another process, as `MonthLeases`
    judges a claim (`claims.alive_elsewhere`). A claim of this very process is the caller's
    own: a run reads its plan before it sends anything, so what its claim names was sent by
    an earlier attempt of it (a retried flow run keeps its id) and is interrupted."""
    found = reader.rows(
        "SELECT holder, host, pid, heartbeat_at, CURRENT_TIMESTAMP FROM month_runs WHERE month = ?",
        month,
    )
    if not found:
        return None
    holder, host, pid, heartbeat_at, now = found[0]
    if host == socket.gethostname() and int(pid) == os.getpid():
        return None
    if not alive_elsewhere(str(host), int(pid), stamped(heartbeat_at), stamped(now)):
        return None
    return str(holder)


def last_event(reader: Reader, month: str) -> int:
    """The number of the month's latest event (0: none yet)."""
    (last,) = reader.one("SELECT MAX(seq) FROM events WHERE month = ?", month)
    return int(last or 0)


def posts_ended_since(reader: Reader, month: str, seq: int) -> dict[str, int]:
    """How many times a post of the month ended `completed`, and `failed`, in the events
    numbered after `seq`: what a run did, even to posts that had ended before it and were
    started over (a changed input), which the month's counts alone cannot tell."""
    ended = dict.fromkeys((PostStatus.COMPLETED.value, PostStatus.FAILED.value), 0)
    found = reader.rows(
        "SELECT to_status, COUNT(*) FROM events WHERE month = ? AND seq > ? AND entity = ? "
        "AND to_status IN (?, ?) GROUP BY to_status",
        month,
        seq,
        EntityKind.POST.name,
        *ended,
    )
    ended.update({str(status): int(n) for status, n in found})
    return ended


def changed_since(reader: Reader, month: str, seq: int, batch_ids: list[str]) -> set[str]:
    """Those of `batch_ids` with an event of their own numbered after `seq`: sent, moved, their
    task id found or their outcome left uncertain since. (A post leaving a batch is the post's
    event: what a resubmission sends is the batch's request as first sent, all the same.)"""
    changed: set[str] = set()
    for start in range(0, len(batch_ids), _IDS_PER_QUERY):
        chunk = batch_ids[start : start + _IDS_PER_QUERY]
        marks = ", ".join("?" for _ in chunk)
        found = reader.rows(
            "SELECT DISTINCT entity_id FROM events WHERE month = ? AND seq > ? AND entity = ? "
            f"AND entity_id IN ({marks})",
            month,
            seq,
            EntityKind.BATCH.name,
            *chunk,
        )
        changed.update(batch_id for (batch_id,) in found)
    return changed


def _members(reader: Reader, month: str, batch_id: str, post_ids: list[str]) -> list[str]:
    """The ids of the posts in the batch now, in file order: by key, among those it was
    planned with (a post may have left it since)."""
    found: list[tuple[int, str]] = []
    for start in range(0, len(post_ids), _IDS_PER_QUERY):
        chunk = post_ids[start : start + _IDS_PER_QUERY]
        marks = ", ".join("?" for _ in chunk)
        rows = reader.rows(
            f"SELECT position, post_id FROM posts WHERE month = ? AND post_id IN ({marks}) "
            "AND batch_id = ?",
            month,
            *chunk,
            batch_id,
        )
        found.extend((int(position), post_id) for position, post_id in rows)
    return [post_id for _, post_id in sorted(found)]


def _json(value: Any) -> Any:
    # SQLite hands a JSON column back as its text; psycopg, already decoded.
    return json.loads(value) if isinstance(value, str) else value


# --- what a month's report shows -------------------------------------------------------------


@dataclass(frozen=True)
class ReportedPost:
    """One post as the report shows it."""

    post_id: str
    text: str
    fields: str | None  # the input line's own keys besides id and text, as canonical JSON
    status: PostStatus
    result: dict[str, Any] | None
    failure_kind: FailureKind | None
    failure_reason: str | None
    attempts: int
    analysis: str | None  # the version of the analysis it is asked (its fingerprint's part)


@dataclass(frozen=True)
class Charge:
    """One paid submission of a batch (a row of `spend`)."""

    batch_id: str
    state: SpendState
    cost: int | None
    estimated_cost: int | None


@dataclass(frozen=True)
class SentRequest:
    """What a batch sent: its request as first sent (None before one was kept), and the posts
    it lists."""

    batch_id: str
    request: list[list[str]] | None
    post_ids: list[str]


def reported_posts(reader: Reader, month: str) -> list[ReportedPost]:
    """The month's posts in file order."""
    rows = reader.rows(
        "SELECT post_id, text, fields, status, result, failure_kind, failure_reason, attempts, "
        "inputs FROM posts WHERE month = ? ORDER BY position",
        month,
    )
    return [
        ReportedPost(
            post_id,
            text,
            fields,
            PostStatus[status],
            _json(result),
            FailureKind[kind] if kind else None,
            reason,
            int(attempts),
            (_json(inputs) or {}).get("schema"),
        )
        for post_id, text, fields, status, result, kind, reason, attempts, inputs in rows
    ]


def analyses(reader: Reader) -> dict[str, str]:
    """Every analysis the ledger keeps: its version and its JSON Schema document, as text."""
    return dict(reader.rows("SELECT version, document FROM analyses"))


def charges(reader: Reader, month: str) -> list[Charge]:
    """The month's spend rows, in the order booked."""
    rows = reader.rows(
        "SELECT batch_id, state, cost, estimated_cost FROM spend WHERE month = ? ORDER BY id",
        month,
    )
    return [Charge(b, SpendState[state], cost, estimate) for b, state, cost, estimate in rows]


def sent_requests(reader: Reader, month: str) -> list[SentRequest]:
    """Every batch of the month, with its request and its posts' ids."""
    rows = reader.rows(
        "SELECT batch_id, request, post_ids FROM batches WHERE month = ? ORDER BY seq", month
    )
    return [SentRequest(b, _json(request), _json(ids)) for b, request, ids in rows]
