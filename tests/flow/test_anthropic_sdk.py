"""The official `anthropic` client, pointed at the simulator, creates a message with a forced
tool call and meets Anthropic's errors as the SDK types them: evidence that the simulator
speaks the real Messages API, so the adapter tested against it speaks it too."""

from __future__ import annotations

import json
from typing import Any, cast

import anthropic
import httpx
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from anthropic.types.messages.batch_create_params import Request

from postledger.upstreams.anthropic_protocol import TOOL_NAME, messages_body
from simulator.model import analyse
from tests.support.ledgers import asked
from tests.support.simulators import Sim, simulator_process

POSTS = [("a", "I love it, thanks!"), ("b", "Why is it broken?")]
SECRET = "fake-key-for-the-anthropic-simulator"


def client(url: str, key: str = SECRET) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)


def our_request() -> MessageCreateParamsNonStreaming:
    """The request postledger's adapter sends, given to the SDK as its arguments."""
    body = messages_body("sim-analyst-1", asked("Analyse each post."), POSTS, max_tokens=1024)
    return cast("MessageCreateParamsNonStreaming", body)


def test_the_adapters_request_through_the_official_client_is_answered_by_its_tool() -> None:
    with simulator_process(latency=0.05, api_key=SECRET) as url:
        answer = client(url).messages.create(**our_request())
        assert answer.stop_reason == "tool_use"
        (block,) = answer.content
        assert block.type == "tool_use" and block.name == TOOL_NAME
        assert block.input == {"results": [analyse(i, text) for i, text in POSTS]}
        assert answer.usage.input_tokens > 0 and answer.usage.output_tokens > 0
        assert [c["post_ids"] for c in Sim(url).charges()] == [["a", "b"]]


@pytest.mark.parametrize(
    ("faults", "error", "kind"),
    [
        ("create:http_503#1", anthropic.OverloadedError, "overloaded_error"),
        ("create:rate_limit#1;retry_after=3", anthropic.RateLimitError, "rate_limit_error"),
        ("create:quota_429#1", anthropic.PaymentRequiredError, "billing_error"),
        ("create:quota#1", anthropic.BadRequestError, "invalid_request_error"),
        ("create:permission#1", anthropic.PermissionDeniedError, "permission_error"),
        ("create:http_500#1", anthropic.InternalServerError, "api_error"),
    ],
)
def test_faults_reach_the_official_client_as_anthropics_errors(
    faults: str, error: type[anthropic.APIStatusError], kind: str
) -> None:
    with simulator_process(latency=0.05, faults=faults) as url:
        with pytest.raises(error) as raised:
            client(url).messages.create(**our_request())
        body = cast("dict[str, Any]", raised.value.body)  # the error's JSON, typed `object`
        assert body["error"]["type"] == kind
        assert raised.value.response.headers.get("request-id")
        if error is anthropic.RateLimitError:
            assert raised.value.response.headers["retry-after"] == "3"
        assert Sim(url).charges() == []  # refused or not taken: nothing billed


def test_a_wrong_key_and_malformed_requests_are_refused_as_anthropic_refuses_them() -> None:
    with simulator_process(latency=0.05, api_key=SECRET) as url:
        with pytest.raises(anthropic.AuthenticationError):
            client(url, "fake-key-wrong").messages.create(**our_request())
        system_role: MessageCreateParamsNonStreaming = {
            **our_request(),
            "messages": [{"role": "system", "content": "x"}],
        }
        with pytest.raises(anthropic.BadRequestError, match="top-level `system`"):
            client(url).messages.create(**system_role)
        unknown_tool: MessageCreateParamsNonStreaming = {
            **our_request(),
            "tool_choice": {"type": "tool", "name": "nope"},
        }
        with pytest.raises(anthropic.BadRequestError, match="not found in tools"):
            client(url).messages.create(**unknown_tool)
        with pytest.raises(anthropic.BadRequestError, match="Extra inputs"):
            client(url).messages.create(**our_request(), extra_body={"response_format": {}})
        assert Sim(url).charges() == []
        # What the SDK cannot leave out, a raw request can: no version header, no max_tokens.
        raw = {k: v for k, v in our_request().items() if k != "max_tokens"}
        answer = httpx.post(f"{url}/v1/messages", json=raw, headers={"x-api-key": SECRET})
        assert answer.status_code == 400 and "anthropic-version" in answer.text
        versioned = {"x-api-key": SECRET, "anthropic-version": "2023-06-01"}
        answer = httpx.post(f"{url}/v1/messages", json=raw, headers=versioned)
        assert answer.status_code == 400 and json.loads(answer.text)["error"]["message"] == (
            "max_tokens: Field required"
        )


def test_a_message_batch_of_the_adapters_request_goes_through_the_official_client() -> None:
    """The Message Batches API as the SDK types it: create, retrieve until ended, results
    (read from `results_url`); a request the API refuses is refused before anything is made."""
    import time

    with simulator_process(latency=0.05, api_key=SECRET) as url:
        batches = client(url).messages.batches
        made = batches.create(requests=[{"custom_id": "2026-10-b0001", "params": our_request()}])
        assert made.type == "message_batch" and made.processing_status == "in_progress"
        deadline = time.monotonic() + 30
        while (seen := batches.retrieve(made.id)).processing_status != "ended":
            assert time.monotonic() < deadline, seen
            time.sleep(0.05)
        assert seen.request_counts.succeeded == 1 and seen.results_url
        (line,) = list(batches.results(made.id))
        assert line.custom_id == "2026-10-b0001" and line.result.type == "succeeded"
        (block,) = line.result.message.content
        assert block.type == "tool_use" and block.name == TOOL_NAME
        assert block.input == {"results": [analyse(i, text) for i, text in POSTS]}
        assert [c["post_ids"] for c in Sim(url).charges()] == [["a", "b"]]

        twice: list[Request] = [{"custom_id": "same", "params": our_request()}] * 2
        with pytest.raises(anthropic.BadRequestError, match="custom_id"):
            batches.create(requests=twice)
        with pytest.raises(anthropic.BadRequestError, match="custom_id"):
            batches.create(requests=[{"custom_id": "no spaces", "params": our_request()}])
        with pytest.raises(anthropic.NotFoundError):
            batches.retrieve("msgbatch_nothing")
        assert len(Sim(url).charges()) == 1
