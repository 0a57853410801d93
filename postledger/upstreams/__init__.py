"""One upstream interface, five protocols (docs/upstreams.md).

Every upstream is used the same way: `create` a task for a batch (paid), `look` at it until
it ends, and (when the upstream can list what it made) `find_task` by the batch's metadata.
A look returns what it saw as a type (`postledger.upstreams.calls`): still running, the
upstream's verdict, or no verdict. What differs between upstreams is said by attributes,
which the business layer reads instead of the kind:

- `has_task_ids`: the upstream keeps a task that can be looked at later by its id (task API,
  Batch API). Chat completions answer synchronously: `create` returns the answer itself
  and there is no id, so an interrupted request can only be sent again (R24).
- `honours_keys`: a create sent again under the same idempotency key cannot pay twice.
- `can_list`: `find_task` can find a task whose id was never saved (the Batch API, by the
  metadata naming the ledger batch and its key): the orphan is adopted, not paid again.
- `carries_many`: a Batch API, where one upstream job (a submission) carries many ledger
  batches, one request line each: `submit` makes it, `look_job` reads each batch's line,
  `find_job` finds one whose id was never saved by the submission's metadata.
- `long_polls`, `max_poll_interval`: how to wait between looks.

A create raises the typed errors of `postledger.upstreams.errors`, which
`postledger.failures.classify` classifies; a look raises only a transport fault (for the
request layer to retry), and returns everything else.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from postledger.settings import Settings, UpstreamKind
from postledger.upstreams.anthropic_batch import AnthropicBatchClient
from postledger.upstreams.anthropic_messages import AnthropicMessagesClient
from postledger.upstreams.anthropic_protocol import messages_body
from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    Found,
    JobLook,
    JobRequest,
    Look,
    NoVerdict,
)
from postledger.upstreams.http import HttpUpstream, Timeouts
from postledger.upstreams.openai_batch import OpenAIBatchClient, request_line
from postledger.upstreams.openai_chat import OpenAIChatClient
from postledger.upstreams.task_api import TaskApiClient

__all__ = [
    "CreateRequest",
    "Created",
    "Upstream",
    "UpstreamFacts",
    "UpstreamNotConfigured",
    "can_list",
    "carries_many",
    "request_bytes",
    "check_configured",
    "facts_of",
    "upstream_for",
]


class UpstreamNotConfigured(ValueError):
    """No upstream is configured: nothing can be sent, so nothing may be marked running."""


class Upstream(Protocol):
    has_task_ids: bool
    honours_keys: bool
    can_list: bool
    carries_many: bool
    long_polls: bool
    max_poll_interval: float | None

    async def __aenter__(self) -> Upstream: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def create(self, request: CreateRequest) -> Created:
        """Create (and pay for) the upstream work of one batch."""
        ...

    async def look(self, task_id: str, *, wait: float = 0.0) -> Look:
        """One look at a task: running, its verdict, or no verdict. With `wait`, an upstream
        that long-polls may hold the answer up to that long, until the task ends."""
        ...

    async def find_task(self, *, batch_id: str, idempotency_key: str) -> Found | NoVerdict:
        """The task made for this batch and key (`Found(None)`: none in the listing, or the
        upstream cannot list); no verdict when the listing could not be read."""
        ...

    async def submit(self, job: JobRequest) -> Created:
        """Create (and pay for) one upstream job that carries many ledger batches."""
        ...

    async def look_job(self, job_id: str, batch_ids: Sequence[str]) -> JobLook:
        """One look at a job: running, ended (each ledger batch's own line), or no verdict."""
        ...

    async def find_job(self, *, submission_id: str, idempotency_key: str) -> Found | NoVerdict:
        """The job made for this submission and key, if the upstream can tell."""
        ...


_CLIENTS: dict[UpstreamKind, type[HttpUpstream]] = {
    UpstreamKind.TASK_API: TaskApiClient,
    UpstreamKind.OPENAI_CHAT: OpenAIChatClient,
    UpstreamKind.OPENAI_BATCH: OpenAIBatchClient,
    UpstreamKind.ANTHROPIC_MESSAGES: AnthropicMessagesClient,
    UpstreamKind.ANTHROPIC_BATCH: AnthropicBatchClient,
}


@dataclass(frozen=True)
class UpstreamFacts:
    """What the configured upstream is like (`Upstream`'s attributes), known without a call."""

    has_task_ids: bool
    honours_keys: bool
    can_list: bool
    carries_many: bool


def facts_of(settings: Settings) -> UpstreamFacts:
    client = _CLIENTS[settings.upstream_kind]
    return UpstreamFacts(
        has_task_ids=client.has_task_ids,
        honours_keys=settings.honours_keys(),
        can_list=client.can_list,
        carries_many=client.carries_many,
    )


def can_list(settings: Settings) -> bool:
    """Whether the configured upstream can find a task whose id was never saved."""
    return _CLIENTS[settings.upstream_kind].can_list


def carries_many(settings: Settings) -> bool:
    """Whether one upstream job of the configured upstream carries many ledger batches."""
    return _CLIENTS[settings.upstream_kind].carries_many


def request_bytes(settings: Settings, batch_id: str, posts: Sequence[tuple[str, str]]) -> int:
    """The bytes one ledger batch's request takes in a Batch API job (its line of the input
    file, its entry of a Message Batch's body)."""
    if settings.upstream_kind is UpstreamKind.ANTHROPIC_BATCH:
        params = messages_body(settings.model, settings.prompt, posts, settings.max_output_tokens)
        request = {"custom_id": batch_id, "params": params}
        return len(json.dumps(request, ensure_ascii=False).encode()) + 1
    line = request_line(batch_id, settings.model, settings.prompt, posts, settings.json_schema)
    return len(line.encode())


def check_configured(settings: Settings) -> None:
    """Raise `UpstreamNotConfigured`, saying how to fix it, when no upstream is set."""
    if not settings.upstream_url:
        raise UpstreamNotConfigured(
            "no upstream is configured: set POSTLEDGER_UPSTREAM_URL (and POSTLEDGER_API_KEY) "
            "on the worker, or name a postledger-upstream block in the deployment's "
            "upstream_block parameter"
        )


def upstream_for(settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> Upstream:
    """The client of the configured upstream; use it as `async with`. `transport`: for tests
    that answer at the wire (an `httpx.MockTransport`)."""
    check_configured(settings)
    assert settings.upstream_url is not None
    url, kind = settings.upstream_url, settings.upstream_kind
    common: dict[str, Any] = {
        "api_key": settings.api_key,
        "honours_keys": settings.honours_keys(),
        "transport": transport,
    }
    timeouts = Timeouts(connect=settings.connect_timeout, read=settings.read_timeout)
    # A synchronous answer takes as long as the model runs.
    answered = Timeouts(connect=settings.connect_timeout, read=settings.chat_timeout)
    if kind is UpstreamKind.OPENAI_CHAT:
        return OpenAIChatClient(url, timeouts=answered, json_schema=settings.json_schema, **common)
    if kind is UpstreamKind.ANTHROPIC_MESSAGES:
        return AnthropicMessagesClient(
            url, timeouts=answered, max_tokens=settings.max_output_tokens, **common
        )
    if kind is UpstreamKind.ANTHROPIC_BATCH:
        return AnthropicBatchClient(
            url, timeouts=timeouts, max_tokens=settings.max_output_tokens, **common
        )
    if kind is UpstreamKind.OPENAI_BATCH:
        return OpenAIBatchClient(
            url,
            timeouts=timeouts,
            json_schema=settings.json_schema,
            completion_window=settings.completion_window,
            search_limit=settings.orphan_search_limit,
            **common,
        )
    return TaskApiClient(url, timeouts=timeouts, **common)
