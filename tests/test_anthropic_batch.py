"""How the Message Batches client speaks and reads, with no server (an in-process
`httpx.MockTransport` answering as Anthropic): the one request of a ledger batch, the result
read from `results_url` (and the key never sent to another host), and what each kind of result
becomes. (Over real HTTP: tests/flow/test_faults.py, tests/flow/test_anthropic_sdk.py.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from postledger.upstreams.anthropic_batch import AnthropicBatchClient
from postledger.upstreams.anthropic_protocol import API_VERSION, TOOL_NAME
from postledger.upstreams.calls import TaskSnapshot, TaskStatus
from postledger.upstreams.errors import UpstreamError
from tests.test_anthropic_messages import RESULTS, message, tool_call
from tests.test_upstream_errors import KEY, REQUEST, client_of, create


def batch(status: str, results_url: str | None = None) -> dict[str, Any]:
    return {
        "id": "msgbatch_1",
        "type": "message_batch",
        "processing_status": status,
        "results_url": results_url,
    }


def snapshot_of(base: str, result: dict[str, Any], results_url: str) -> tuple[Any, list[str]]:
    """What `get_task` makes of an ended batch with this one result line; the URLs asked."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        if request.url.path.endswith("/results"):
            line = {"custom_id": REQUEST.batch_id, "result": result}
            return httpx.Response(200, content=json.dumps(line).encode() + b"\n")
        return httpx.Response(200, json=batch("ended", results_url))

    async def read() -> Any:
        async with client_of(AnthropicBatchClient, answer, base) as client:
            try:
                return await client.get_task("msgbatch_1")
            except UpstreamError as exc:
                return exc

    return asyncio.run(read()), asked


def test_a_ledger_batch_is_one_request_named_by_its_id() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=batch("in_progress"))

    created = create(client_of(AnthropicBatchClient, answer, "https://api.anthropic.com"))
    assert created.task_id == "msgbatch_1" and created.finished is None
    (request,) = seen
    assert request.url == "https://api.anthropic.com/v1/messages/batches"
    assert (
        request.headers["x-api-key"] == KEY and request.headers["anthropic-version"] == API_VERSION
    )
    (one,) = json.loads(request.content)["requests"]
    assert one["custom_id"] == REQUEST.batch_id
    assert one["params"]["tool_choice"] == {"type": "tool", "name": TOOL_NAME}
    assert [p["id"] for p in json.loads(one["params"]["messages"][0]["content"])["posts"]] == [
        post_id for post_id, _ in REQUEST.posts
    ]


@pytest.mark.parametrize("base", ["https://api.anthropic.com", "https://api.anthropic.com/v1"])
def test_a_succeeded_result_is_the_answer_read_from_results_url(base: str) -> None:
    url = "https://api.anthropic.com/v1/messages/batches/msgbatch_1/results"
    result = {"type": "succeeded", "message": message([tool_call(RESULTS)])}
    snapshot, asked = snapshot_of(base, result, url)
    assert isinstance(snapshot, TaskSnapshot) and snapshot.status is TaskStatus.SUCCEEDED
    assert json.loads(snapshot.output or "") == RESULTS
    assert snapshot.usage == {"input_tokens": 100, "output_tokens": 40}
    assert asked[-1] == url  # whatever the configured base, the URL Anthropic gave


@pytest.mark.parametrize(
    ("result", "why"),
    [
        (
            {
                "type": "errored",
                "error": {"type": "error", "error": {"type": "api_error", "message": "boom"}},
            },
            "errored: api_error: boom (not billed)",
        ),
        ({"type": "expired"}, "expired before this request ran (not billed)"),
        ({"type": "canceled"}, "canceled before this request ran (not billed)"),
    ],
)
def test_a_request_that_did_not_succeed_fails_the_task_and_says_it_was_not_billed(
    result: dict[str, Any], why: str
) -> None:
    url = "https://api.anthropic.com/v1/messages/batches/msgbatch_1/results"
    snapshot, _ = snapshot_of("https://api.anthropic.com", result, url)
    assert snapshot.status is TaskStatus.FAILED and snapshot.output is None
    assert why in (snapshot.error or "") and snapshot.billed is False


def test_the_key_is_never_sent_to_a_results_url_on_another_host() -> None:
    result = {"type": "succeeded", "message": message([tool_call(RESULTS)])}
    elsewhere = "https://collector.example/v1/messages/batches/msgbatch_1/results"
    error, asked = snapshot_of("https://api.anthropic.com", result, elsewhere)
    assert isinstance(error, UpstreamError) and "another host" in str(error)
    assert all(url.startswith("https://api.anthropic.com/") for url in asked)


def test_a_batch_still_in_progress_is_running() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=batch("in_progress"))

    async def read() -> TaskSnapshot:
        async with client_of(AnthropicBatchClient, answer, "https://api.anthropic.com") as client:
            snapshot: TaskSnapshot = await client.get_task("msgbatch_1")
            return snapshot

    assert asyncio.run(read()).status is TaskStatus.RUNNING
