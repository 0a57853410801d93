"""How the Anthropic Messages client speaks and reads: the request it sends (headers, forced
tool, no key anywhere but `x-api-key`), the answer it reads back (the tool call's input, the
usage with cached tokens), and every error Anthropic documents mapped to what the business
layer does about it. (Over real HTTP against the simulator: tests/flow/test_faults.py and
tests/flow/test_anthropic_sdk.py.)

No server: the client talks to an in-process `httpx.MockTransport` answering as Anthropic."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from postledger.failures.classify import classify, failure_of
from postledger.failures.policy import Reach
from postledger.record.models import FailureKind
from postledger.upstreams.anthropic_messages import AnthropicMessagesClient
from postledger.upstreams.anthropic_protocol import API_VERSION, TOOL_NAME, message_result
from postledger.upstreams.calls import Delivered, NoVerdict, NoVerdictReason, UpstreamFailed
from postledger.upstreams.errors import EndpointNotFound, RejectedError, TransportError
from postledger.upstreams.http import parse_reset_time, retry_after_of
from tests.unit.test_upstream_errors import KEY, client_of, create, create_error

RESULTS = {"results": [{"id": "p1", "category": "bug", "sentiment": "negative", "summary": "x"}]}


def message(content: list[dict[str, Any]], **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 40, **usage},
    }


def tool_call(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": TOOL_NAME, "input": arguments}


def anthropic_error(status: int, kind: str, text: str, **headers: str) -> httpx.Response:
    body = {"type": "error", "error": {"type": kind, "message": text}}
    return httpx.Response(status, json=body, headers=headers)


def test_the_request_names_the_version_carries_the_key_in_its_header_and_forces_the_tool() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=message([tool_call(RESULTS)]))

    created = create(client_of(AnthropicMessagesClient, answer, "https://api.anthropic.com"))
    (request,) = seen
    assert request.url.path == "/v1/messages"
    assert request.headers["anthropic-version"] == API_VERSION
    assert request.headers["x-api-key"] == KEY and "authorization" not in request.headers
    assert request.headers["x-litellm-num-retries"] == "0"  # a gateway must not retry
    body = json.loads(request.content)
    assert body["tool_choice"] == {"type": "tool", "name": TOOL_NAME}
    assert [tool["name"] for tool in body["tools"]] == [TOOL_NAME]
    assert body["max_tokens"] == 4096
    (system,) = body["system"]  # one block: the instructions, the cache's breakpoint
    assert "Analyse." in system["text"] and system["cache_control"] == {"type": "ephemeral"}
    assert [m["role"] for m in body["messages"]] == ["user"]  # no "system" role
    assert created.task_id is None and isinstance(created.finished, Delivered)
    assert json.loads(created.finished.output) == RESULTS


@pytest.mark.parametrize("base", ["https://gw.example/anthropic", "https://gw.example/v1"])
def test_a_base_url_with_or_without_v1_reaches_v1_messages(base: str) -> None:
    paths: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        return httpx.Response(200, json=message([tool_call(RESULTS)]))

    create(client_of(AnthropicMessagesClient, answer, base))
    assert paths[0].endswith("/v1/messages") and "/v1/v1/" not in paths[0]


def test_cache_reads_and_writes_are_counted_apart_from_fresh_input() -> None:
    body = message([tool_call(RESULTS)], cache_creation_input_tokens=7, cache_read_input_tokens=3)
    answer = message_result(body)
    assert isinstance(answer, Delivered)
    assert answer.usage == {
        "input_tokens": 100,
        "cached_input_tokens": 3,
        "cache_write_tokens": 7,
        "output_tokens": 40,
    }


def test_a_text_answer_is_the_output_to_check_and_an_empty_one_says_why() -> None:
    text = message_result(message([{"type": "text", "text": "I cannot."}]))
    assert isinstance(text, Delivered) and text.output == "I cannot."  # paid: checked, unusable
    empty = message_result({**message([]), "stop_reason": "max_tokens"})
    assert isinstance(empty, UpstreamFailed) and empty.billed and "max_tokens" in empty.reason
    assert empty.usage is not None  # what it used is booked as it is


def test_a_body_that_is_not_a_message_has_no_verdict() -> None:
    seen = message_result({"type": "error"})
    assert isinstance(seen, NoVerdict) and seen.reason is NoVerdictReason.NOT_THE_ANSWER


CREDIT = "Your credit balance is too low to access the Anthropic API."


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (anthropic_error(401, "authentication_error", "invalid x-api-key"), FailureKind.AUTH),
        (anthropic_error(403, "permission_error", "not allowed"), FailureKind.PERMISSION),
        (anthropic_error(402, "billing_error", CREDIT), FailureKind.QUOTA),
        (anthropic_error(400, "invalid_request_error", CREDIT), FailureKind.QUOTA),
        (
            anthropic_error(400, "invalid_request_error", "max_tokens: too big"),
            FailureKind.REJECTED,
        ),
        (anthropic_error(413, "request_too_large", "too large"), FailureKind.REJECTED),
        (anthropic_error(429, "rate_limit_error", "slow down"), FailureKind.RATE_LIMITED),
    ],
)
def test_refusals_are_classified_as_anthropic_documents_them(
    answer: httpx.Response, kind: FailureKind
) -> None:
    error = create_error(client_of(AnthropicMessagesClient, lambda _: answer, "https://a.test"))
    assert isinstance(error, RejectedError)
    assert classify(error) is kind
    assert failure_of(error).reach is Reach.NEVER  # refused: nothing was made


def test_overloaded_is_not_taken_and_a_500_may_have_been_billed() -> None:
    overloaded = anthropic_error(529, "overloaded_error", "Overloaded")
    error = create_error(client_of(AnthropicMessagesClient, lambda _: overloaded, "https://a"))
    assert isinstance(error, TransportError) and not error.maybe_sent  # safe to send again
    internal = anthropic_error(500, "api_error", "Internal server error")
    error = create_error(client_of(AnthropicMessagesClient, lambda _: internal, "https://a"))
    assert isinstance(error, TransportError) and error.maybe_sent  # never resent without a yes


def test_an_unknown_model_says_to_check_the_model() -> None:
    answer = anthropic_error(404, "not_found_error", "model: claude-nonexistent")
    error = create_error(client_of(AnthropicMessagesClient, lambda _: answer, "https://a.test"))
    assert isinstance(error, EndpointNotFound) and "POSTLEDGER_MODEL" in str(error)


def test_the_wait_comes_from_retry_after_or_from_the_reset_times() -> None:
    now = datetime.now(UTC)
    later = (now + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    sooner = (now + timedelta(seconds=5)).isoformat()
    headers = httpx.Headers(
        {"anthropic-ratelimit-requests-reset": sooner, "anthropic-ratelimit-tokens-reset": later}
    )
    wait = retry_after_of(headers)
    assert wait is not None and 28 < wait <= 30  # the later of the two limits
    assert retry_after_of(httpx.Headers({"retry-after": "7", **headers})) == 7.0
    assert parse_reset_time("2026-12-01T20:00:00") is None  # no zone: unusable
    assert parse_reset_time("soon") is None
