"""How the Message Batches client speaks and reads, with no server (an in-process
`httpx.MockTransport` answering as Anthropic): the one request of a ledger batch, the results
read at the documented path through the configured base URL (the key never sent to the host a
`results_url` names), and what each kind of result becomes. (Over real HTTP:
tests/flow/test_faults.py, tests/flow/test_anthropic_sdk.py.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from postledger.upstreams.anthropic_batch import AnthropicBatchClient
from postledger.upstreams.anthropic_protocol import API_VERSION, TOOL_NAME
from postledger.upstreams.calls import (
    Delivered,
    JobEnded,
    NoVerdict,
    NoVerdictReason,
    Running,
    UpstreamFailed,
)
from tests.unit.test_anthropic_messages import RESULTS, message, tool_call
from tests.unit.test_upstream_errors import KEY, REQUEST, client_of, create


def batch(status: str, results_url: str | None = None) -> dict[str, Any]:
    return {
        "id": "msgbatch_1",
        "type": "message_batch",
        "processing_status": status,
        "results_url": results_url,
    }


def snapshot_of(base: str, result: dict[str, Any], results_url: str) -> tuple[Any, list[str]]:
    """What one look makes of an ended batch with this one result line; the URLs asked."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        if request.url.path.endswith("/results"):
            line = {"custom_id": REQUEST.batch_id, "result": result}
            return httpx.Response(200, content=json.dumps(line).encode() + b"\n")
        return httpx.Response(200, json=batch("ended", results_url))

    async def read() -> Any:
        async with client_of(AnthropicBatchClient, answer, base) as client:
            return await client.look("msgbatch_1")

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
def test_a_succeeded_result_is_the_answer_read_at_the_documented_path(base: str) -> None:
    url = "https://api.anthropic.com/v1/messages/batches/msgbatch_1/results"
    result = {"type": "succeeded", "message": message([tool_call(RESULTS)])}
    snapshot, asked = snapshot_of(base, result, url)
    assert isinstance(snapshot, Delivered)
    assert json.loads(snapshot.output) == RESULTS
    assert snapshot.usage == {
        "input_tokens": 100,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 40,
    }
    assert asked[-1] == url  # whatever the configured base's form


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
    assert isinstance(snapshot, UpstreamFailed)
    assert why in snapshot.reason and snapshot.billed is False


@pytest.mark.parametrize(
    "elsewhere",
    [
        "https://api.anthropic.com/v1/messages/batches/msgbatch_1/results",  # behind a gateway
        "https://collector.example/v1/messages/batches/msgbatch_1/results",
    ],
)
def test_behind_a_gateway_the_results_are_read_through_it_and_the_key_goes_nowhere_else(
    elsewhere: str,
) -> None:
    """The gateway passes on Anthropic's `results_url`, on Anthropic's own host: the results
    are read through the configured base URL at the documented path, and the key is never
    sent to the host the URL names."""
    result = {"type": "succeeded", "message": message([tool_call(RESULTS)])}
    snapshot, asked = snapshot_of("https://gateway.example/anthropic", result, elsewhere)
    assert isinstance(snapshot, Delivered) and json.loads(snapshot.output) == RESULTS
    assert asked[-1] == "https://gateway.example/anthropic/v1/messages/batches/msgbatch_1/results"
    assert all(url.startswith("https://gateway.example/anthropic/") for url in asked)


def test_results_that_lack_a_batchs_line_or_are_cut_have_no_verdict_for_it() -> None:
    good = {
        "custom_id": "b1",
        "result": {"type": "succeeded", "message": message([tool_call(RESULTS)])},
    }
    cut = json.dumps({"custom_id": "b2", "result": {"type": "succeeded"}})[:20]

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/results"):
            return httpx.Response(200, content=(json.dumps(good) + "\n" + cut).encode())
        return httpx.Response(200, json=batch("ended", "https://api.anthropic.com/x"))

    async def read() -> Any:
        async with client_of(AnthropicBatchClient, answer, "https://api.anthropic.com") as client:
            return await client.look_job("msgbatch_1", ["b1", "b2", "b3"])

    seen = asyncio.run(read())
    assert isinstance(seen, JobEnded) and isinstance(seen.lines["b1"], Delivered)
    for missing in ("b2", "b3"):
        line = seen.lines[missing]
        assert isinstance(line, NoVerdict) and line.reason is NoVerdictReason.RESULTS_INCOMPLETE


@pytest.mark.parametrize(
    "body",
    [
        {"id": "msgbatch_1", "processing_status": "paused"},  # a status Anthropic does not have
        ["msgbatch_1"],  # not a Message Batch at all
    ],
)
def test_a_body_that_is_not_a_message_batch_has_no_verdict(body: Any) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    async def read() -> Any:
        async with client_of(AnthropicBatchClient, answer, "https://api.anthropic.com") as client:
            return await client.look_job("msgbatch_1", ["b1"])

    seen = asyncio.run(read())
    assert isinstance(seen, NoVerdict) and seen.reason is NoVerdictReason.NOT_THE_ANSWER


def test_a_batch_still_in_progress_is_running() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=batch("in_progress"))

    async def read() -> Any:
        async with client_of(AnthropicBatchClient, answer, "https://api.anthropic.com") as client:
            return await client.look("msgbatch_1")

    assert isinstance(asyncio.run(read()), Running)
