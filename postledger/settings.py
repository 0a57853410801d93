"""All settings in one pydantic-settings model, read from `POSTLEDGER_*` variables.

Prefect Blocks (`blocks/`) fill the same model: a flow run builds its settings once, from its
blocks or the environment, and passes them to everything it runs, so the core never asks where
a value came from. A key is a `SecretStr`: passed along, never shown, logged or persisted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from postledger.analysis import Analysis, load_analysis
from postledger.defaults import (
    BUNDLED_SIMULATOR,
    DEFAULT_PRICES,
    JOB_LIMITS,
    MAX_IN_FLIGHT,
    SQLITE_BUSY_TIMEOUT,
    Price,
    PriceBook,
    ledger_url,
    month_file,
    sqlite_file,
)

__all__ = ["MAX_IN_FLIGHT", "Limits", "Price", "PriceBook", "Settings", "UpstreamKind"]


@dataclass(frozen=True)
class Limits:
    max_attempts: int = 3  # paid submissions per post (R15)
    max_requeues: int = 5  # unpaid bounces per post (rate limits, never-delivered requests)
    default_wait: float = 30.0  # seconds, when a rate limit gives no usable Retry-After
    max_wait: float = 600.0  # seconds, the longest wait a Retry-After may impose


class UpstreamKind(StrEnum):
    """The protocol the paid AI service speaks (docs/upstreams.md)."""

    TASK_API = "task_api"  # the async task API: POST /v1/tasks, GET /v1/tasks/{id}
    OPENAI_CHAT = "openai_chat"  # POST {base}/chat/completions: synchronous, no task id
    OPENAI_BATCH = "openai_batch"  # the OpenAI Batch API: {base}/files + {base}/batches
    ANTHROPIC_MESSAGES = "anthropic_messages"  # POST {root}/v1/messages: synchronous, no id
    ANTHROPIC_BATCH = "anthropic_batch"  # POST {root}/v1/messages/batches: polled, no metadata

    @property
    def batch_api(self) -> bool:
        """A provider's Batch API: one job of many requests, billed at a discount."""
        return self.value in JOB_LIMITS

    @property
    def sibling(self) -> UpstreamKind | None:
        """The same provider's other way in (chat ↔ Batch API); the task API has none."""
        return _SIBLINGS.get(self)


_SIBLINGS = {
    UpstreamKind.OPENAI_CHAT: UpstreamKind.OPENAI_BATCH,
    UpstreamKind.OPENAI_BATCH: UpstreamKind.OPENAI_CHAT,
    UpstreamKind.ANTHROPIC_MESSAGES: UpstreamKind.ANTHROPIC_BATCH,
    UpstreamKind.ANTHROPIC_BATCH: UpstreamKind.ANTHROPIC_MESSAGES,
}
# What OpenAI's and Anthropic's Batch APIs take off every price (POSTLEDGER_BATCH_DISCOUNT).
BATCH_DISCOUNT_PERCENT = 50


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="POSTLEDGER_", extra="ignore")

    # --- ledger ---
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the ledger; default: SQLite at .postledger/ledger.db",
    )
    data_dir: Path = Field(default=Path("data/posts"), description="where YYYY-MM.jsonl live")
    sqlite_busy_timeout: float = Field(
        default=SQLITE_BUSY_TIMEOUT,
        gt=0,
        description="seconds a SQLite write waits for another writer",
    )
    spill_path: Path | None = Field(
        default=None,
        description="where a paid batch's task id and output go when the ledger cannot be "
        "written: a folder, or a file name (one file per month beside it); default: next to "
        "the SQLite file. Required with a shared (PostgreSQL) ledger: a folder every worker "
        "can write and the next run can read",
    )

    # --- upstream (the paid AI service) ---
    upstream_kind: UpstreamKind = Field(
        default=UpstreamKind.TASK_API,
        description="the protocol of the upstream: task_api (default), openai_chat (chat "
        "completions, synchronous), openai_batch (the OpenAI Batch API), "
        "anthropic_messages (Anthropic's Messages API, synchronous) or anthropic_batch "
        "(Anthropic's Message Batches API)",
    )
    upstream_url: str | None = Field(
        default=None,
        description="base URL of the upstream. task_api: the server root (the client adds "
        "/v1/tasks); openai_chat and openai_batch: the OpenAI-style base URL with its version "
        "path, as the openai SDK's base_url (e.g. https://api.openai.com/v1); "
        "anthropic_messages and anthropic_batch: the API's root, as the anthropic SDK's "
        "base_url (e.g. "
        "https://api.anthropic.com). Unset: `postledger run` starts the simulator",
    )
    upstream_name: str | None = Field(
        default=None,
        description="stable name of the upstream, the key of its circuit breaker; default: "
        "host:port of upstream_url, or `simulator`",
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="sent as Authorization: Bearer (Anthropic's kinds: as x-api-key)",
    )
    model: str = "sim-analyst-1"
    analysis: str | None = Field(
        default=None,
        description="what each post is asked (docs/analysis.md): a JSON Schema file "
        "(examples/support_triage.json), a pydantic model (examples.support_triage:SupportTriage "
        "or a file.py:Model), or the JSON Schema itself; empty: the built-in analysis "
        "(category, sentiment, summary)",
    )
    prompt: str | None = Field(
        default=None,
        description="replaces the analysis's instructions (its description, or the pydantic "
        "model's docstring); empty: the analysis's own",
    )
    upstream_idempotent: bool = Field(
        default=False,
        description="task_api only: set true if the upstream honours Idempotency-Key (a create "
        "sent again under the same key never makes, nor charges, a second task); then an "
        "ambiguous create is retried safely. Unset: an ambiguous create is never resent "
        "without a person's yes. openai_chat and openai_batch never honour keys (ignored)",
    )
    create_settle: float = Field(
        default=10.0,
        ge=0,
        description="openai_batch: seconds to wait, after a create whose answer was lost, "
        "before looking for the batch it may have made (a new batch takes a moment to be "
        "listed)",
    )
    completion_window: str = Field(
        default="24h",
        description="openai_batch: the completion_window of each upstream batch",
    )
    json_schema: bool = Field(
        default=True,
        description="openai_chat, openai_batch: ask for the answer with response_format "
        "json_schema (strict); false: json_object, for servers without structured outputs",
    )
    chat_timeout: float = Field(
        default=300.0,
        gt=0,
        description="openai_chat, anthropic_messages: seconds to wait for one synchronous answer",
    )
    max_output_tokens: int = Field(
        default=4096,
        ge=1,
        description="anthropic_messages, anthropic_batch: max_tokens of each request (the API "
        "requires one); "
        "25 analyses take about 2 000. An answer cut off by it is checked like any other: "
        "its missing posts are sent again",
    )
    orphan_search_limit: int = Field(
        default=500,
        ge=1,  # 0 would never find the batch a resent create must reuse: it would pay twice
        description="openai_batch, anthropic_batch: how many of the most recent upstream "
        "batches are looked through for one made for a ledger batch whose id was never saved "
        "(after a create whose answer was lost, before a confirmed resubmission, and in "
        "recovery); keep it above what the organisation creates in a day",
    )
    connect_timeout: float = Field(default=5.0, gt=0)
    read_timeout: float = Field(default=30.0, gt=0)
    poll_interval: float = Field(default=0.5, gt=0, description="seconds between polls")
    poll_wait: float = Field(
        default=10.0,
        ge=0,
        description="long-poll: ask the upstream to hold a poll this long until the task ends",
    )
    task_deadline: float = Field(
        default=3600.0, gt=0, description="give up waiting for one upstream task after this"
    )
    progress_every: float = Field(
        default=60.0,
        gt=0,
        description="Batch APIs: seconds between two looks at a running job's counts (kept in "
        "the ledger for `postledger status`) and between two refreshes of the progress "
        "artifact while work is in flight",
    )

    # --- batches (R7, R8) ---
    max_batch_posts: int = Field(default=25, ge=1)
    # ~20 000 characters is 5 000–7 000 tokens of input: it leaves room for the instructions and
    # for 25 structured answers inside an 8k–16k context window, the smallest in common use.
    max_batch_chars: int = Field(default=20_000, ge=1)
    max_in_flight: int = Field(
        default=MAX_IN_FLIGHT,
        ge=1,
        description="batches running at once; on a Batch API (openai_batch, anthropic_batch), "
        "submissions: upstream jobs, each carrying many batches",
    )
    max_submission_batches: int | None = Field(
        default=None,
        ge=1,
        description="openai_batch, anthropic_batch: the most batches (request lines) one "
        "upstream job carries; default: the provider's limit (OpenAI 50 000 lines and 200 MB "
        "per file, Anthropic 100 000 requests and 256 MB per Message Batch)",
    )

    # --- retries: two layers, counted apart (R16) ---
    request_retries: int = Field(default=3, ge=0, description="per HTTP call, transport faults")
    request_backoff: float = Field(default=1.0, ge=0, description="first retry delay, seconds")
    max_attempts: int = Field(default=3, ge=1, description="paid attempts per post")
    max_requeues: int = Field(default=5, ge=0, description="unpaid bounces per post")
    rate_limit_wait: float = Field(
        default=30.0, ge=0, description="wait after a 429 without a usable Retry-After"
    )
    rate_limit_max_wait: float = Field(default=600.0, ge=0, description="cap on Retry-After")

    # --- money (R51, R52; integers in micro-units: 1 000 000 = one unit of the currency) ---
    prices: dict[str, Price] = Field(
        default_factory=lambda: dict(DEFAULT_PRICES),
        description='per model, per million tokens, e.g. {"m": {"input": 150000, "output": '
        "600000}} ($0.15 / $0.60)",
    )
    batch_discount: int = Field(
        default=BATCH_DISCOUNT_PERCENT,
        ge=0,
        le=100,
        description="percent a Batch API kind takes off every price of the table",
    )
    max_cost: int | None = Field(
        default=None,
        ge=0,
        description="budget per month in micro-units: a batch that would cross it waits for a "
        "person's yes",
    )

    # --- asking a person (R19, R24) ---
    approval_timeout: int = Field(
        default=86_400,
        ge=1,
        description="seconds a paused run waits for a person before it stops (default 24 h: "
        "long enough to answer the next morning)",
    )
    approval_poll: float = Field(
        default=10.0, gt=0, description="seconds between a paused run's looks for an answer"
    )

    def limits(self) -> Limits:
        return Limits(
            max_attempts=self.max_attempts,
            max_requeues=self.max_requeues,
            default_wait=self.rate_limit_wait,
            max_wait=self.rate_limit_max_wait,
        )

    @field_validator("upstream_url")
    @classmethod
    def _strip_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value

    def simulated(self) -> bool:
        """Whether the upstream is `postledger run`'s bundled simulator: nothing is paid."""
        return self.breaker_name() == BUNDLED_SIMULATOR

    def analysis_in_use(self) -> Analysis:
        """The analysis each post is asked; raises AnalysisError when it cannot be used."""
        return load_analysis(self.analysis, instructions=self.prompt)

    def fixed_analysis(self) -> Settings:
        """These settings with their analysis read once and given as its JSON Schema itself:
        every batch of a run asks the same question, even if the file changes meanwhile."""
        analysis = self.analysis_in_use()
        text = json.dumps(analysis.json_schema(), ensure_ascii=False)  # its fields in order
        return self.model_copy(update={"analysis": text, "prompt": None})

    def price(self, kind: UpstreamKind | None = None) -> Price | None:
        """What the configured model costs on `kind` (the configured one by default): its
        table price, with a Batch API's discount unless the table sets one for the model.
        None if the table has no price for it."""
        return self.price_book().price(kind=(kind or self.upstream_kind).value)

    def price_book(self) -> PriceBook:
        """What each model costs on each kind: what a send is billed at, by the model and
        kind it went to (its spend row keeps them)."""
        return PriceBook(self.prices, self.batch_discount, self.model, self.upstream_kind.value)

    def breaker_name(self) -> str:
        """The key of the upstream's breaker: the same for every run against it (R18)."""
        if self.upstream_name:
            return self.upstream_name
        if not self.upstream_url:
            return BUNDLED_SIMULATOR
        parsed = urlsplit(self.upstream_url)
        return f"{parsed.hostname}:{parsed.port}" if parsed.port else str(parsed.hostname)

    def resolved_spill_path(self) -> Path:
        """R20, R46: where the append-only spill files live (one per month, `spill_file`)."""
        if self.spill_path:
            return self.spill_path
        database = sqlite_file(self.resolved_database_url(create_folder=False))
        if database is not None:
            return Path(f"{database}.spill.jsonl")
        return Path.cwd() / ".postledger" / "spill.jsonl"

    def spill_file(self, month: str) -> Path:
        """The spill file of one month (postledger.guards.spill)."""
        return month_file(self.resolved_spill_path(), month)

    def resolved_database_url(self, *, create_folder: bool = True) -> str:
        """The ledger's URL: POSTLEDGER_DATABASE_URL, or SQLite at ./.postledger/ledger.db."""
        return ledger_url(self.database_url, create_folder=create_folder)
