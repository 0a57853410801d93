"""Ledger tables (their enums are in `kinds.py`).

The ledger is the single source of truth: every decision (retry, wait, resume, ask) is made from
these records, never from memory. Statuses are changed only by `postledger.record.states`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import JSON, Column, Index, Text, text
from sqlalchemy.types import DateTime, TypeDecorator
from sqlmodel import Field, SQLModel

from postledger.record.kinds import (
    RETRIED,
    Answer,
    BatchStatus,
    BreakerLevel,
    Charge,
    EntityKind,
    FailureKind,
    PostStatus,
    Question,
    SpendState,
    batch_id_for,
    month_of,
    utcnow,
)

# Re-exported: most of the code takes the enums (and the clock) from here, beside the tables.
__all__ = [
    "Answer",
    "BatchStatus",
    "BreakerLevel",
    "Charge",
    "EntityKind",
    "FailureKind",
    "PostStatus",
    "Question",
    "SpendState",
    "batch_id_for",
    "month_of",
    "utcnow",
]


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC, always returns timezone-aware UTC (SQLite keeps no zone of its own)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the ledger: use timezone-aware UTC")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _when(nullable: bool = False) -> Any:
    return Column(UTCDateTime(), nullable=nullable)


class PostRecord(SQLModel, table=True):
    """One post of one month: its state, attempts, result and failure."""

    __tablename__ = "posts"
    # Planning reads a month's pending posts in file order (migration 0004). A batch's posts are
    # found by key among the batch's own post ids: no index by batch (migration 0011). The few
    # posts retried or requeued are found by the partial index, for the month's sums (0012).
    __table_args__ = (
        Index("ix_posts_month_status_position", "month", "status", "position"),
        Index(
            "ix_posts_retried", "month", sqlite_where=text(RETRIED), postgresql_where=text(RETRIED)
        ),
    )

    month: str = Field(primary_key=True, max_length=7)
    post_id: str = Field(primary_key=True)
    # Position in the input file: planning follows it so that batches are deterministic.
    position: int
    text: str = Field(sa_column=Column(Text, nullable=False))
    # The input line's own keys besides id and text (author, source, …), as the canonical JSON
    # of `batches.posts.input_fields`, for the report; None when it has none (or before
    # migration 0005). Not part of the fingerprint: a changed author reuses the result.
    fields: str | None = Field(default=None, sa_column=Column(Text))
    fingerprint: str = Field(max_length=64)
    # The parts of the fingerprint (`batches.posts.input_parts`): to say what changed (R25).
    inputs: dict[str, str] | None = Field(default=None, sa_column=Column(JSON))
    # Found by month or by batch, through the indexes above (migration 0007).
    status: PostStatus = Field(default=PostStatus.PENDING)
    # Business attempts (R15, R16): submissions that contained this post and may have been
    # charged. A submission the upstream certainly never took is given back.
    attempts: int = 0
    # Paid attempts a person allowed beyond max_attempts (`postledger retry`): the cap is
    # max_attempts + extra_attempts, kept here so that it survives every restart (R15).
    extra_attempts: int = 0
    # Business retries that cost nothing (a rate limit, a request that never arrived): bounded
    # too, so that a post cannot bounce forever.
    requeues: int = 0
    # The post was in a batch whose whole output was unusable and was split (R12): it is never
    # split again, whatever batch it is planned into later (one split per lineage).
    split: bool = False
    batch_id: str | None = None
    result: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    failure_kind: FailureKind | None = None
    failure_reason: str | None = Field(default=None, sa_column=Column(Text))
    not_before: datetime | None = Field(default=None, sa_column=_when(nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=_when())
    updated_at: datetime = Field(default_factory=utcnow, sa_column=_when())


class PostCountRecord(SQLModel, table=True):
    """How many of a month's posts are in one state: kept by the state machine in the
    transaction that moves them (`postledger.record.post_counts`), so that a month's counts
    are a few rows read, not a month of posts counted (migration 0012)."""

    __tablename__ = "post_counts"

    month: str = Field(primary_key=True, max_length=7)
    status: PostStatus = Field(primary_key=True)
    posts: int = 0


class BatchRecord(SQLModel, table=True):
    """One paid submission: which posts, which upstream task, what came back."""

    __tablename__ = "batches"
    # The next batches to start: a month's queued ones in start order (migration 0004).
    __table_args__ = (Index("ix_batches_month_status_seq", "month", "status", "seq"),)

    batch_id: str = Field(primary_key=True)
    month: str = Field(index=True, max_length=7)
    seq: int  # 1, 2, … within the month: start order (R9)
    post_ids: list[str] = Field(sa_column=Column(JSON, nullable=False))
    # [[post id, text], ...] as first sent: every send under this key sends exactly this.
    request: list[list[str]] | None = Field(default=None, sa_column=Column(JSON))
    status: BatchStatus = Field(default=BatchStatus.QUEUED, index=True)
    # The breaker name of the upstream it was sent to (set when it is marked running): in probe,
    # one batch per upstream may be running across every month and run (R18).
    upstream: str | None = None
    # The run (month claim holder) that marked it running, while that run still handles it: a
    # batch is in flight only then. One left by a dead run, or left uncertain for recovery, is
    # not (None once left uncertain).
    sent_by: str | None = None
    # Set on the halves of a batch whose whole output was unusable (R12): they are not split again.
    split_from: str | None = None
    # Sent with the create call so that an upstream that honours it never charges twice.
    idempotency_key: str
    # On a Batch API: the submission (one upstream job, many ledger batches) that sent it last.
    submission_id: str | None = None
    upstream_task_id: str | None = None
    sends: int = 0  # how often this batch (this idempotency key) was sent
    charge: Charge = Charge.NONE
    not_before: datetime | None = Field(default=None, sa_column=_when(nullable=True))
    raw_output: str | None = Field(default=None, sa_column=Column(Text))
    usage: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    # Request-layer retries (R16): counted here, never as business attempts.
    request_retries: int = 0
    # Retries a gateway between us and the upstream reported making on its own (LiteLLM's
    # x-litellm-attempted-retries): each may have been charged, so each is a possible charge.
    gateway_retries: int = 0
    failure_kind: FailureKind | None = None
    failure_reason: str | None = Field(default=None, sa_column=Column(Text))
    created_at: datetime = Field(default_factory=utcnow, sa_column=_when())
    started_at: datetime | None = Field(default=None, sa_column=_when(nullable=True))
    finished_at: datetime | None = Field(default=None, sa_column=_when(nullable=True))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=_when())


class SentBatch(Protocol):
    """What settling a sent batch reads of it: its full record, or a `JobBatch`."""

    @property
    def batch_id(self) -> str: ...

    @property
    def month(self) -> str: ...

    @property
    def request_retries(self) -> int: ...


@dataclass(frozen=True, slots=True)
class JobBatch:
    """A batch of a Batch API job as a trip holds it while the job runs (hours): three small
    fields, not an ORM record with its posts (20 000 of those were ~50 MB a job)."""

    batch_id: str
    month: str
    request_retries: int


class SubmissionRecord(SQLModel, table=True):
    """One upstream job on a Batch API carrying many ledger batches, one request line each.
    Written before the upstream is called (with its key and metadata), so that a crash leaves
    a record to look the job up by; its job id (and input file) kept the moment they are known."""

    __tablename__ = "submissions"

    submission_id: str = Field(primary_key=True)
    month: str = Field(index=True, max_length=7)
    idempotency_key: str
    batch_ids: list[str] = Field(sa_column=Column(JSON, nullable=False))
    metadata_sent: dict[str, str] = Field(sa_column=Column(JSON, nullable=False))
    upstream_job_id: str | None = None
    file_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow, sa_column=_when())
    # The upstream's own count of the job's requests by state, the last time a look saw it
    # running (`postledger.record.job_counts.JobCounts`), and when: only shown, never decided
    # from (migration 0015).
    upstream_counts: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    counts_seen_at: datetime | None = Field(default=None, sa_column=_when(nullable=True))


class EventRecord(SQLModel, table=True):
    """Append-only history: every status change, with from, to, why and when.

    `seq` numbers a month's events 1, 2, 3, … with no gap: it is computed as max + 1 under the
    month's write lock, so two writers that were not serialized would collide on the key.
    """

    __tablename__ = "events"

    # A month's history is read in seq order, and nothing else asks for an event (migration
    # 0009): the key is the only index an event keeps up to date.
    month: str = Field(primary_key=True, max_length=7)
    seq: int = Field(primary_key=True)
    entity: EntityKind
    entity_id: str
    from_status: str | None = None
    to_status: str
    why: str = Field(sa_column=Column(Text, nullable=False))
    at: datetime = Field(default_factory=utcnow, sa_column=_when())


class BreakerRecord(SQLModel, table=True):
    """The breaker of one upstream, shared by every month and every run (R18, R19)."""

    __tablename__ = "breakers"

    upstream: str = Field(primary_key=True)  # a stable name, never a URL with credentials
    level: BreakerLevel = BreakerLevel.NORMAL
    # Final transport failures with no success in between; request retries never count.
    failures: int = 0
    reason: str | None = Field(default=None, sa_column=Column(Text))
    changed_at: datetime = Field(default_factory=utcnow, sa_column=_when())


class BreakerEventRecord(SQLModel, table=True):
    """Append-only history of a breaker: every change of level, and every person's answer."""

    __tablename__ = "breaker_events"

    id: int | None = Field(default=None, primary_key=True)
    upstream: str = Field(index=True)
    month: str | None = Field(default=None, max_length=7)  # the run that caused it, if any
    from_level: BreakerLevel
    to_level: BreakerLevel
    why: str = Field(sa_column=Column(Text, nullable=False))
    at: datetime = Field(default_factory=utcnow, sa_column=_when())


class ApprovalRecord(SQLModel, table=True):
    """A question put to a person by a paused run, and the answer.

    The paused run's id and its Prefect API are kept here so that `postledger approve` can find
    and resume it from any terminal, and so that an answer given while no run waits still
    counts for the next run."""

    __tablename__ = "approvals"

    id: int | None = Field(default=None, primary_key=True)
    month: str = Field(index=True, max_length=7)
    upstream: str
    kind: Question = Question.BREAKER
    question: str = Field(sa_column=Column(Text, nullable=False))
    # RECOVERY: the interrupted batches the question is about, and the yes given for each group.
    batch_ids: list[str] | None = Field(default=None, sa_column=Column(JSON))
    # RECOVERY: the month's last event number (`events.seq`) when those batches were shown. The
    # answer covers a batch only as it was then: one with a later event of its own (sent again,
    # ended uncertain, its task found) is asked about again. None: not known (an answer kept
    # before migration 0013), and then it covers nothing.
    shown_seq: int | None = None
    poll: bool | None = None
    resubmit: bool | None = None
    used_at: datetime | None = Field(default=None, sa_column=_when(nullable=True))
    flow_run_id: str | None = None
    prefect_api_url: str | None = None
    asked_at: datetime = Field(default_factory=utcnow, sa_column=_when())
    answer: Answer | None = None  # None while unanswered
    note: str | None = Field(default=None, sa_column=Column(Text))
    answered_by: str | None = None  # "Prefect UI", "postledger approve", "timeout"
    answered_at: datetime | None = Field(default=None, sa_column=_when(nullable=True))


class SpendRecord(SQLModel, table=True):
    """One paid submission of a batch, written before the call with its estimated cost, and
    settled with the upstream's usage. Money in integer micro-units (postledger.guards.spend)."""

    __tablename__ = "spend"
    # A model's latest sends, for the estimate to learn from (migration 0017).
    __table_args__ = (Index("ix_spend_model_id", "model", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    month: str = Field(index=True, max_length=7)
    batch_id: str = Field(index=True)
    send: int  # the batch's send number that may have made this charge
    state: SpendState = SpendState.POSSIBLE
    estimated_cost: int | None = None  # None: no price known for the model
    # The usage by class of token (postledger.guards.usage); None until it is known.
    input_tokens: int | None = None  # read fresh
    cached_input_tokens: int | None = None  # read from the provider's prompt cache
    cache_write_tokens: int | None = None  # written to it
    output_tokens: int | None = None
    cost: int | None = None  # from the usage and the price table
    # What the send asked, for the estimate to learn from (migration 0017; None before it): the
    # model, the upstream kind, the posts and the characters (instructions and posts) sent.
    model: str | None = None
    kind: str | None = None
    asked_posts: int | None = None
    asked_chars: int | None = None
    at: datetime = Field(default_factory=utcnow, sa_column=_when())
    updated_at: datetime = Field(default_factory=utcnow, sa_column=_when())


class ForecastRecord(SQLModel, table=True):
    """What the month should cost in all, as its latest run forecast it before sending
    (`postledger.progress.forecast`): what it had committed then, plus the forecast of what was
    left. The live bar and `postledger status` set the spend against it (migration 0018)."""

    __tablename__ = "forecasts"

    month: str = Field(primary_key=True, max_length=7)
    total: int | None = None  # micro-units; None: no price for the model
    posts: int  # left to send when it was made
    made_at: datetime = Field(default_factory=utcnow, sa_column=_when())


class MonthRunRecord(SQLModel, table=True):
    """Which run is processing a month now: one at a time, or a second run would take the
    first one's batches in flight for interrupted ones (and could pay for them twice)."""

    __tablename__ = "month_runs"

    month: str = Field(primary_key=True, max_length=7)
    holder: str  # the flow run id (or a random id outside Prefect)
    host: str
    pid: int
    heartbeat_at: datetime = Field(default_factory=utcnow, sa_column=_when())


class SpillImportRecord(SQLModel, table=True):
    """A spill record taken into the ledger (R20), by its id: importing a spill file twice, or
    two runs importing at once, takes each fact in once."""

    __tablename__ = "spill_imports"

    record_id: str = Field(primary_key=True)
    batch_id: str
    kind: str
    at: datetime = Field(default_factory=utcnow, sa_column=_when())


class AnalysisRecord(SQLModel, table=True):
    """An analysis the month's posts were asked (docs/analysis.md), kept by its fields' version
    (the fingerprint's "schema" part): the report reads each completed post's result by the
    analysis that produced it, from the ledger alone."""

    __tablename__ = "analyses"

    version: str = Field(primary_key=True, max_length=64)
    name: str
    # The analysis as a JSON Schema document (`Analysis.json_schema`), read back by the report.
    document: str = Field(sa_column=Column(Text, nullable=False))
    first_used: datetime = Field(default_factory=utcnow, sa_column=_when())
