"""How our HTTP clients read an upstream's answers: a 404 that means a wrong URL, quota errors
told apart from rate limits by their message too (as a gateway wraps them), the waits and the
retries a gateway reports, the header that turns a gateway's own retries off, and the Batch
API's create that never pays twice.

No server: each client talks to an in-process `httpx.MockTransport`, which answers as the
upstream (or a LiteLLM proxy in front of it) would."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from postledger.failures.classify import classify, failure_of
from postledger.failures.policy import Reach
from postledger.record.models import FailureKind
from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    Found,
    JobWanted,
    NoVerdict,
    NoVerdictReason,
    Unknown,
)
from postledger.upstreams.errors import (
    AmbiguousCreate,
    EndpointNotFound,
    RejectedError,
    TransportError,
    UpstreamError,
)
from postledger.upstreams.http import HttpUpstream, gateway_retries_of, retry_after_of
from postledger.upstreams.openai_batch import OpenAIBatchClient, submission_metadata
from postledger.upstreams.openai_chat import OpenAIChatClient
from postledger.upstreams.task_api import TaskApiClient
from tests.support.ledgers import asked

KEY = "fake-key-for-the-error-tests"


def wanted(submission_id: str) -> JobWanted:
    """A submission of two batches, written down an hour ago under the key `key-1`."""
    written = datetime.now(UTC) - timedelta(hours=1)
    return JobWanted(submission_id, "key-1", ("2026-10-b0001", "2026-10-b0002"), written)


REQUEST = CreateRequest(
    "2026-10-b0001", "sim-analyst-1", asked("Analyse."), [("p1", "hello")], "key-1"
)
Handler = Callable[[httpx.Request], httpx.Response]


def client_of(kind: type[HttpUpstream], handler: Handler, base: str) -> Any:
    return kind(base, api_key=SecretStr(KEY), transport=httpx.MockTransport(handler))


def run(call: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(call())


async def _create(client: Any) -> Created:
    async with client:
        created: Created = await client.create(REQUEST)
        return created


def create(client: Any) -> Created:
    return asyncio.run(_create(client))


def raised(client: Any, call: Callable[[Any], Coroutine[Any, Any, Any]]) -> UpstreamError:
    async def go() -> UpstreamError:
        async with client:
            try:
                await call(client)
            except UpstreamError as exc:
                return exc
        raise AssertionError("no error was raised")

    error: UpstreamError = run(go)
    assert KEY not in str(error)
    return error


def create_error(client: Any) -> UpstreamError:
    return raised(client, lambda c: c.create(REQUEST))


def error_body(
    status: int, type_: str | None, message: str, code: Any = None, **headers: str
) -> httpx.Response:
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return httpx.Response(status, json=body, headers=headers)


def completion(**headers: str) -> httpx.Response:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"content": '{"results": []}'}, "finish_reason": "s"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }
    return httpx.Response(200, json=body, headers=headers)


def not_found(request: httpx.Request) -> httpx.Response:
    return error_body(404, "invalid_request_error", "Not found")


BATCH_LIST_EMPTY = {"object": "list", "data": [], "has_more": False}


def batch_api(
    *, files: Handler | None = None, batches: Handler | None = None, listing: Handler | None = None
) -> Handler:
    """A Batch API: an empty listing, an upload, a made batch, unless told otherwise."""

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path == "/v1/batches":
            return listing(request) if listing else httpx.Response(200, json=BATCH_LIST_EMPTY)
        if request.method == "POST" and path == "/v1/files":
            return files(request) if files else httpx.Response(200, json={"id": "file_1"})
        if request.method == "POST" and path == "/v1/batches":
            return batches(request) if batches else httpx.Response(200, json={"id": "batch_1"})
        return httpx.Response(599, text=f"unexpected {request.method} {path}")

    return handle


# --- 404: a wrong URL, not an unknown task --------------------------------------------------


def test_a_404_on_the_task_api_create_names_the_url_and_is_a_misconfiguration() -> None:
    error = create_error(client_of(TaskApiClient, not_found, "http://up.example:8080/api"))
    assert isinstance(error, EndpointNotFound)
    assert "http://up.example:8080/api/v1/tasks" in str(error)
    assert "POSTLEDGER_UPSTREAM_URL" in str(error)
    failure = failure_of(error)
    assert failure.kind is FailureKind.REJECTED
    assert failure.reach is Reach.NEVER and failure.misconfigured


def test_a_404_on_a_chat_create_says_the_base_url_needs_its_version_path() -> None:
    error = create_error(client_of(OpenAIChatClient, not_found, "https://api.openai.com"))
    assert isinstance(error, EndpointNotFound)
    assert "https://api.openai.com/chat/completions" in str(error)
    assert "POSTLEDGER_UPSTREAM_URL" in str(error)
    assert "https://api.openai.com/v1" in str(error)  # the example of a right base URL
    assert failure_of(error).misconfigured


def test_a_404_for_an_unknown_model_says_to_check_the_model() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return error_body(
            404,
            "invalid_request_error",
            "The model `gpt-9` does not exist or you do not have access to it.",
            "model_not_found",
        )

    error = create_error(client_of(OpenAIChatClient, handler, "https://api.openai.com/v1"))
    assert isinstance(error, EndpointNotFound) and failure_of(error).misconfigured
    assert "POSTLEDGER_MODEL" in str(error) and "gpt-9" in str(error)


@pytest.mark.parametrize(
    ("route", "handler"),
    [
        ("POST https://up.example/v1/files", batch_api(files=not_found)),
        ("POST https://up.example/v1/batches", batch_api(batches=not_found)),
    ],
)
def test_a_404_on_each_batch_api_create_call_names_its_url(route: str, handler: Handler) -> None:
    error = create_error(client_of(OpenAIBatchClient, handler, "https://up.example/v1"))
    assert isinstance(error, EndpointNotFound)
    assert route in str(error)
    assert "POSTLEDGER_UPSTREAM_URL" in str(error) and "version path" in str(error)
    failure = failure_of(error)
    assert failure.misconfigured and failure.reach is Reach.NEVER


def test_a_404_on_the_batch_listing_is_no_answer_that_names_its_url() -> None:
    """A look for an orphan answered 404: no answer about the orphan (nothing is made again on
    the strength of it), and a wrong base URL, said as such (it stops the run)."""

    async def find() -> Any:
        handler = batch_api(listing=not_found)
        async with client_of(OpenAIBatchClient, handler, "https://up.example/v1") as client:
            return await client.find_job(wanted("2026-10-s1"))

    seen = run(find)
    assert isinstance(seen, NoVerdict) and isinstance(seen.refusal, EndpointNotFound)
    assert "GET https://up.example/v1/batches" in seen.detail and "?" not in seen.detail
    assert failure_of(seen.refusal).misconfigured


def looked(client: Any, task_id: str) -> Any:
    async def go() -> Any:
        async with client:
            return await client.look(task_id)

    return run(go)


def test_a_404_when_reading_a_task_by_its_id_is_the_upstreams_unknown_id() -> None:
    seen = looked(client_of(TaskApiClient, not_found, "http://up.example"), "t-123")
    assert isinstance(seen, Unknown) and "404" in seen.reason
    seen = looked(client_of(OpenAIBatchClient, not_found, "https://up.example/v1"), "batch_123")
    assert isinstance(seen, Unknown)


# --- quota, told by its message too ---------------------------------------------------------


def refusal_of(response: httpx.Response) -> RejectedError:
    error = create_error(client_of(OpenAIChatClient, lambda _: response, "https://gw.example/v1"))
    assert isinstance(error, RejectedError)
    return error


def test_litellms_throttling_error_that_says_the_quota_is_spent_is_quota() -> None:
    error = refusal_of(
        error_body(
            429,
            "throttling_error",
            "litellm.RateLimitError: RateLimitError: OpenAIException - You exceeded your "
            "current quota, please check your plan and billing details.",
            "429",
        )
    )
    assert error.body.type == "throttling_error" and error.body.code == "429"
    assert error.error_type == "429"  # the code, else the type, as before
    assert classify(error) is FailureKind.QUOTA
    assert failure_of(error).reach is Reach.NEVER


def test_openais_insufficient_quota_is_quota() -> None:
    error = refusal_of(
        error_body(
            429, "insufficient_quota", "You exceeded your current quota.", "insufficient_quota"
        )
    )
    assert classify(error) is FailureKind.QUOTA
    # by its type alone, with no code and another message
    assert classify(refusal_of(error_body(429, "insufficient_quota", "No."))) is FailureKind.QUOTA


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (429, "Billing hard limit has been reached"),
        (400, "Your credit balance is too low to access the Anthropic API."),
        (403, "insufficient_quota: the key's project has no balance left"),
    ],
)
def test_a_message_that_says_the_balance_is_spent_is_quota(status: int, message: str) -> None:
    error = refusal_of(error_body(status, "some_gateway_error", message, None))
    assert classify(error) is FailureKind.QUOTA


def test_a_plain_rate_limit_stays_a_rate_limit() -> None:
    error = refusal_of(
        error_body(
            429,
            "throttling_error",
            "litellm.RateLimitError: Rate limit reached for requests. Limit: 500 / min.",
            "429",
            **{"llm_provider-retry-after": "7"},
        )
    )
    assert classify(error) is FailureKind.RATE_LIMITED
    assert error.retry_after == 7 and failure_of(error).retry_after == 7
    openai_style = refusal_of(
        error_body(429, "requests", "Rate limit reached for requests.", "rate_limit_exceeded")
    )
    assert classify(openai_style) is FailureKind.RATE_LIMITED
    per_minute = refusal_of(
        error_body(429, "RESOURCE_EXHAUSTED", "Quota exceeded for requests per minute.", 429)
    )
    assert classify(per_minute) is FailureKind.RATE_LIMITED  # a window: waiting helps


def test_a_quota_message_on_other_statuses_does_not_change_their_kind() -> None:
    error = refusal_of(error_body(401, "invalid_request_error", "You exceeded your current quota"))
    assert classify(error) is FailureKind.AUTH


# --- waits and retries a gateway reports ------------------------------------------------------


def test_the_wait_a_gateway_forwards_from_the_provider_is_read() -> None:
    H = httpx.Headers
    assert retry_after_of(H({"llm_provider-retry-after": "12"})) == 12
    date = formatdate(usegmt=True)  # now: a wait of about nothing, never negative
    assert 0 <= (retry_after_of(H({"llm_provider-retry-after": date})) or 0) < 2
    assert retry_after_of(H({"llm_provider-retry-after-ms": "2500"})) == 2.5
    assert (
        retry_after_of(
            H(
                {
                    "llm_provider-x-ratelimit-reset-requests": "6m0s",
                    "llm_provider-x-ratelimit-reset-tokens": "20ms",
                }
            )
        )
        == 360
    )
    # the direct headers come first
    assert retry_after_of(H({"retry-after": "3", "llm_provider-retry-after": "12"})) == 3
    assert (
        retry_after_of(H({"x-ratelimit-reset-requests": "1s", "llm_provider-retry-after": "9"}))
        == 1
    )
    assert retry_after_of(H({"llm_provider-retry-after": "soon"})) is None


def test_gateway_retries_are_read_and_garbage_is_ignored() -> None:
    H = httpx.Headers
    assert gateway_retries_of(H({"x-litellm-attempted-retries": "2"})) == 2
    assert gateway_retries_of(H({"x-litellm-attempted-retries": " 1 "})) == 1
    for garbage in ("two", "-1", "1.5", ""):
        assert gateway_retries_of(H({"x-litellm-attempted-retries": garbage})) == 0
    assert gateway_retries_of(H({})) == 0


def test_a_chat_create_reports_the_gateways_retries() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return completion(**{"x-litellm-attempted-retries": "2"})

    created = create(client_of(OpenAIChatClient, handler, "https://gw.example/v1"))
    assert created.gateway_retries == 2 and created.finished is not None
    plain = create(client_of(OpenAIChatClient, lambda _: completion(), "https://gw.example/v1"))
    assert plain.gateway_retries == 0


def test_the_task_api_and_batch_api_creates_report_the_gateways_retries() -> None:
    def task_api(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"task_id": "t-1"}, headers={"x-litellm-attempted-retries": "1"}
        )

    created = create(client_of(TaskApiClient, task_api, "http://up.example"))
    assert created == Created("t-1", gateway_retries=1)

    def made(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"id": "batch_9"}, headers={"x-litellm-attempted-retries": "3"}
        )

    created = create(client_of(OpenAIBatchClient, batch_api(batches=made), "https://up.example/v1"))
    assert created == Created("batch_9", gateway_retries=3, file_id="file_1")


def test_a_failing_answer_carries_the_gateways_retries() -> None:
    def server_error(request: httpx.Request) -> httpx.Response:
        return error_body(500, "server_error", "boom", None, **{"x-litellm-attempted-retries": "2"})

    error = create_error(client_of(OpenAIChatClient, server_error, "https://gw.example/v1"))
    assert isinstance(error, TransportError) and error.maybe_sent
    assert error.gateway_retries == 2 and "retried it 2 times" in str(error)

    def refused(request: httpx.Request) -> httpx.Response:
        return error_body(
            400, "invalid_request_error", "bad", None, **{"x-litellm-attempted-retries": "1"}
        )

    error = create_error(client_of(OpenAIChatClient, refused, "https://gw.example/v1"))
    assert isinstance(error, RejectedError) and error.gateway_retries == 1

    def ok(request: httpx.Request) -> httpx.Response:
        return error_body(400, "invalid_request_error", "bad")

    assert (
        create_error(client_of(OpenAIChatClient, ok, "https://gw.example/v1")).gateway_retries == 0
    )


@pytest.mark.parametrize("kind", [TaskApiClient, OpenAIChatClient, OpenAIBatchClient])
def test_every_request_turns_a_gateways_own_retries_off(kind: type[HttpUpstream]) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if kind is TaskApiClient:
            return httpx.Response(200, json={"task_id": "t-1"})
        if kind is OpenAIChatClient:
            return completion()
        return batch_api()(request)

    create(client_of(kind, handler, "https://gw.example/v1"))
    assert seen
    for request in seen:
        assert request.headers["x-litellm-num-retries"] == "0"
        assert request.headers["authorization"] == f"Bearer {KEY}"


# --- the Batch API's create never pays twice --------------------------------------------------


def test_a_timeout_on_the_file_upload_is_safe_to_retry() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    error = create_error(
        client_of(OpenAIBatchClient, batch_api(files=timeout), "https://up.example/v1")
    )
    assert type(error) is TransportError and not error.maybe_sent
    assert failure_of(error).reach is Reach.NEVER

    def server_error(request: httpx.Request) -> httpx.Response:
        return error_body(500, "server_error", "boom")

    error = create_error(
        client_of(OpenAIBatchClient, batch_api(files=server_error), "https://up.example/v1")
    )
    assert type(error) is TransportError and not error.maybe_sent and error.http_status == 500


def test_a_timeout_on_the_listing_is_safe_to_retry() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    error = raised(
        client_of(OpenAIBatchClient, batch_api(listing=timeout), "https://up.example/v1"),
        lambda c: c.find_job(wanted("2026-10-s1")),
    )
    assert type(error) is TransportError and not error.maybe_sent


@pytest.mark.parametrize("answer", ["timeout", "reset", 500, 502, 504])
def test_a_fault_on_post_batches_that_may_have_made_it_is_ambiguous(answer: Any) -> None:
    def batches(request: httpx.Request) -> httpx.Response:
        if answer == "timeout":
            raise httpx.ReadTimeout("timed out", request=request)
        if answer == "reset":
            raise httpx.RemoteProtocolError("peer closed connection", request=request)
        return error_body(
            answer, "server_error", "boom", None, **{"x-litellm-attempted-retries": "1"}
        )

    error = create_error(
        client_of(OpenAIBatchClient, batch_api(batches=batches), "https://up.example/v1")
    )
    assert isinstance(error, AmbiguousCreate) and not isinstance(error, TransportError)
    assert "may have been made" in str(error)
    assert error.gateway_retries == (0 if isinstance(answer, str) else 1)
    failure = failure_of(error)
    assert failure.kind is FailureKind.TRANSPORT and failure.reach is Reach.MAYBE


def test_a_503_or_no_connection_on_post_batches_made_nothing() -> None:
    def unavailable(request: httpx.Request) -> httpx.Response:
        return error_body(503, "server_error", "overloaded")

    error = create_error(
        client_of(OpenAIBatchClient, batch_api(batches=unavailable), "https://up.example/v1")
    )
    assert type(error) is TransportError and not error.maybe_sent

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    error = create_error(
        client_of(OpenAIBatchClient, batch_api(batches=refused), "https://up.example/v1")
    )
    assert type(error) is TransportError and not error.maybe_sent


def test_the_batch_api_does_not_claim_to_honour_keys_and_finds_a_job_by_its_metadata() -> None:
    posted: list[str] = []
    made = {"id": "batch_old", "metadata": submission_metadata("2026-10-s1", "key-1")}

    def listing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [made], "has_more": False})

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posted.append(request.url.path)
        return batch_api(listing=listing)(request)

    client = client_of(OpenAIBatchClient, handler, "https://up.example/v1")
    assert client.honours_keys is False

    async def find(submission_id: str) -> Any:
        async with client_of(OpenAIBatchClient, handler, "https://up.example/v1") as again:
            return await again.find_job(wanted(submission_id))

    assert run(lambda: find("2026-10-s1")) == Found("batch_old")  # a resend reuses it
    assert run(lambda: find("2026-10-s2")) == Found(None)
    assert posted == []  # looking makes nothing


def test_a_listing_that_is_not_a_listing_is_no_answer() -> None:
    def html(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>Sign in to the network</html>")

    async def find() -> Any:
        async with client_of(
            OpenAIBatchClient, batch_api(listing=html), "https://up.example/v1"
        ) as c:
            return await c.find_job(wanted("2026-10-s1"))

    seen = run(find)
    assert isinstance(seen, NoVerdict) and seen.reason is NoVerdictReason.NOT_THE_ANSWER
