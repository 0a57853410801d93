"""One upstream interface, five protocols (docs/upstreams.md).

Every upstream is used the same way: `create` a task for a batch (paid), `wait_for_task` until
it ends, and — when the upstream can list what it made — `find_task` by the batch's metadata.
What differs is said by three attributes, which the business layer reads instead of the kind:

- `has_task_ids`: the upstream keeps a task that can be polled later by its id (task API,
  Batch API). Chat completions answer synchronously: `create` returns the finished result
  and there is no id, so an interrupted request can only be sent again (R24).
- `honours_keys`: a create sent again under the same idempotency key cannot pay twice.
- `can_list`: `find_task` can find a task whose id was never saved (the Batch API, by the
  metadata naming the ledger batch and its key): the orphan is adopted, not paid again.
- `carries_many`: a Batch API, where one upstream job (a submission) carries many ledger
  batches, one request line each: `submit` makes it, `wait_for_job` reads each batch's line,
  `find_job` finds one whose id was never saved by the submission's metadata.

All raise the same typed errors (`postledger.upstreams.errors`), which
`postledger.failures.classify` classifies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from postledger.settings import Settings, UpstreamKind
from postledger.upstreams.anthropic_batch import AnthropicBatchClient
from postledger.upstreams.anthropic_messages import AnthropicMessagesClient
from postledger.upstreams.anthropic_protocol import messages_body
from postledger.upstreams.calls import Created, CreateRequest, JobRequest, JobSnapshot, TaskSnapshot
from postledger.upstreams.http import HttpUpstream, Timeouts
from postledger.upstreams.openai_batch import OpenAIBatchClient, request_line
from postledger.upstreams.openai_chat import OpenAIChatClient
from postledger.upstreams.task_api import TaskApiClient

__all__ = [
    "CreateRequest",
    "Created",
    "Upstream",
    "UpstreamNotConfigured",
    "can_list",
    "carries_many",
    "request_bytes",
    "check_configured",
    "upstream_for",
]


class UpstreamNotConfigured(ValueError):
    """No upstream is configured: nothing can be sent, so nothing may be marked running."""


class Upstream(Protocol):
    has_task_ids: bool
    honours_keys: bool
    can_list: bool
    carries_many: bool

    async def __aenter__(self) -> Upstream: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def create(self, request: CreateRequest) -> Created:
        """Create (and pay for) the upstream work of one batch."""
        ...

    async def wait_for_task(
        self, task_id: str, *, poll_interval: float, poll_wait: float, deadline: float
    ) -> TaskSnapshot:
        """Poll the task until it ends; its output, usage or error."""
        ...

    async def find_task(self, *, batch_id: str, idempotency_key: str) -> str | None:
        """The id of the task made for this batch and key; None if none is found or the
        upstream cannot list its tasks."""
        ...

    async def submit(self, job: JobRequest) -> Created:
        """Create (and pay for) one upstream job that carries many ledger batches."""
        ...

    async def wait_for_job(
        self, job_id: str, batch_ids: Sequence[str], *, poll_interval: float, deadline: float
    ) -> JobSnapshot:
        """Poll the job until it ends; each ledger batch's own result."""
        ...

    async def find_job(self, *, submission_id: str, idempotency_key: str) -> str | None:
        """The id of the job made for this submission and key, if the upstream can tell."""
        ...


_CLIENTS: dict[UpstreamKind, type[HttpUpstream]] = {
    UpstreamKind.TASK_API: TaskApiClient,
    UpstreamKind.OPENAI_CHAT: OpenAIChatClient,
    UpstreamKind.OPENAI_BATCH: OpenAIBatchClient,
    UpstreamKind.ANTHROPIC_MESSAGES: AnthropicMessagesClient,
    UpstreamKind.ANTHROPIC_BATCH: AnthropicBatchClient,
}


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


def upstream_for(settings: Settings) -> Upstream:
    """The client of the configured upstream; use it as `async with`."""
    check_configured(settings)
    assert settings.upstream_url is not None
    url, kind = settings.upstream_url, settings.upstream_kind
    common: dict[str, Any] = {"api_key": settings.api_key, "honours_keys": settings.honours_keys()}
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
