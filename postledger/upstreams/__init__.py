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
- `can_list`: `find_task` or `find_job` can find work whose id was never saved (OpenAI's
  Batch API by the metadata naming the ledger batch or submission and its key; Anthropic's
  Message Batches by the requests they carry): the orphan is adopted, not paid again.
- `carries_many`: a Batch API, where one upstream job (a submission) carries many ledger
  batches, one request line each: `submit` makes it, `look_job` reads each batch's line,
  `find_job` finds one whose id was never saved.
- `long_polls`, `max_poll_interval`: how to wait between looks.

A create raises the typed errors of `postledger.upstreams.errors`, which
`postledger.failures.classify` classifies; a look raises only a transport fault (for the
request layer to retry), and returns everything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from postledger.errors import PostledgerError
from postledger.settings import Settings, UpstreamKind
from postledger.upstreams.anthropic_batch import AnthropicBatchClient
from postledger.upstreams.anthropic_messages import AnthropicMessagesClient
from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    Found,
    JobLook,
    JobRequest,
    JobWanted,
    Look,
    NoVerdict,
)
from postledger.upstreams.errors import TransportError
from postledger.upstreams.http import HttpUpstream
from postledger.upstreams.openai_batch import OpenAIBatchClient
from postledger.upstreams.openai_chat import OpenAIChatClient
from postledger.upstreams.task_api import TaskApiClient

__all__ = [
    "CreateRequest",
    "Created",
    "Found",
    "JobLook",
    "JobRequest",
    "JobWanted",
    "Look",
    "NoVerdict",
    "TransportError",
    "Upstream",
    "UpstreamFacts",
    "UpstreamNotConfigured",
    "can_list",
    "carries_many",
    "request_bytes",
    "base_url_of",
    "check_configured",
    "client_of",
    "needs_key",
    "facts_of",
    "upstream_for",
]


LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


class UpstreamNotConfigured(PostledgerError):
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

    async def find_job(self, wanted: JobWanted) -> Found | NoVerdict:
        """The job made for this submission, if the upstream can tell (by the metadata it
        was made with, or by what it carries)."""
        ...


# The providers, one line each: a client class says everything about its provider.
_CLIENTS: dict[UpstreamKind, type[HttpUpstream]] = {
    client.kind: client
    for client in (
        TaskApiClient,
        OpenAIChatClient,
        OpenAIBatchClient,
        AnthropicMessagesClient,
        AnthropicBatchClient,
    )
}


def client_of(kind: UpstreamKind) -> type[HttpUpstream]:
    return _CLIENTS[kind]


@dataclass(frozen=True)
class UpstreamFacts:
    """What the configured upstream is like (`Upstream`'s attributes, and its provider's
    limits under the settings), known without a call."""

    has_task_ids: bool
    honours_keys: bool
    can_list: bool
    sends_metadata: bool  # a job carries the submission's metadata (what `find_job` reads)
    carries_many: bool
    wait_deadline: float  # seconds to wait for one upstream task before it is left uncertain
    most_batches_per_job: int  # ledger batches (request lines) one upstream job may carry
    most_bytes_per_job: int


def facts_of(settings: Settings) -> UpstreamFacts:
    client = client_of(settings.upstream_kind)
    lines, size = client.job_limits
    return UpstreamFacts(
        has_task_ids=client.has_task_ids,
        honours_keys=client.keys_honoured(settings),
        can_list=client.can_list,
        sends_metadata=client.sends_metadata,
        carries_many=client.carries_many,
        wait_deadline=client.deadline(settings),
        most_batches_per_job=min(lines, settings.max_submission_batches or lines),
        most_bytes_per_job=size,
    )


def can_list(settings: Settings) -> bool:
    """Whether the configured upstream can find a task whose id was never saved."""
    return client_of(settings.upstream_kind).can_list


def carries_many(settings: Settings) -> bool:
    """Whether one upstream job of the configured upstream carries many ledger batches."""
    return client_of(settings.upstream_kind).carries_many


def needs_key(settings: Settings) -> bool:
    """Whether the configured upstream wants an API key: every provider's service does; a
    server on this machine (vLLM, Ollama, the simulator) may not."""
    if not client_of(settings.upstream_kind).needs_key or not settings.upstream_url:
        return False
    return urlsplit(settings.upstream_url).hostname not in LOOPBACK


def base_url_of(kind: UpstreamKind, root: str) -> str:
    """The base URL of this kind for a server at `root` (OpenAI's kinds take the base URL with
    its version path, as the openai SDK's base_url; the others the root)."""
    return f"{root}{client_of(kind).version_path}"


def request_bytes(settings: Settings, batch_id: str, posts: Sequence[tuple[str, str]]) -> int:
    """The bytes one ledger batch's request takes in a Batch API job (its line of the input
    file, its entry of a Message Batch's body)."""
    return client_of(settings.upstream_kind).request_bytes(settings, batch_id, posts)


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
    return client_of(settings.upstream_kind).from_settings(settings, transport)
