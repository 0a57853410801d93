"""What marking counts of a Batch API job's size is what the job's create sends: each ledger
batch's request sized (`request_bytes`, by which a job stops taking batches before the
provider's byte limit) as it is written into the body. No server: the client talks to an
in-process `httpx.MockTransport` that keeps the body it is sent.

Why: a Message Batch's request is named by its batch id *and* a token of its submission's key
(`line_id`). Sized by the batch id alone, each request was counted 17 bytes short, and a job
of ~24 000 requests filled to its 256 MB limit by those counts was ~400 kB over it: the
provider refuses such a create whole."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from pydantic import SecretStr

from postledger.settings import Settings, UpstreamKind
from postledger.upstreams import request_bytes
from postledger.upstreams.anthropic_batch import AnthropicBatchClient
from postledger.upstreams.calls import JobRequest

BATCHES = [
    (
        f"2026-10-b{n:04d}",
        [(f"p{n}-{i}", f'post {i} of batch {n}: "quoted", é ✓') for i in range(3)],
    )
    for n in range(1, 6)
]
# The body's own bytes around its requests: `{"requests": [` and `]}`.
WRAPPER = len('{"requests": [') + len("]}")


def test_a_message_batch_body_is_as_large_as_its_requests_were_sized() -> None:
    settings = Settings(upstream_kind=UpstreamKind.ANTHROPIC_BATCH, prompt="Analyse.")
    analysis = settings.analysis_in_use()
    sent: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.read())
        return httpx.Response(200, json={"id": "msgbatch_1", "processing_status": "in_progress"})

    client = AnthropicBatchClient(
        "https://api.anthropic.com",
        api_key=SecretStr("a-test-key"),
        max_tokens=settings.max_output_tokens,
        transport=httpx.MockTransport(answer),
    )
    job = JobRequest("2026-10-s1", settings.model, analysis, BATCHES, "a-key-of-any-length-1")
    asyncio.run(client.submit(job))
    asyncio.run(client.aclose())

    (body,) = sent
    assert len(json.loads(body)["requests"]) == len(BATCHES)
    sized = sum(request_bytes(settings, batch_id, posts) for batch_id, posts in BATCHES)
    # Each request and its separator, exactly: the last has none, the wrapper is the rest.
    assert len(body) == sized - 1 + WRAPPER


@pytest.mark.parametrize("key", ["k", "a-much-longer-idempotency-key-" * 4])
def test_a_requests_size_does_not_depend_on_its_submissions_key(key: str) -> None:
    """The key is drawn after the batches are marked: the size must hold for any key."""
    from postledger.upstreams.anthropic_batch_match import line_id

    assert len(line_id("2026-10-b0001", key)) == len(line_id("2026-10-b0001", ""))
