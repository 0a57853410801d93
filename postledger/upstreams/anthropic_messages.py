"""Anthropic's Messages API (`POST {base}/v1/messages`), or a gateway that speaks it.

One request per batch, answered synchronously, like chat completions: `create` returns the
finished result, there is no task id, and the API takes no idempotency key. So a request
interrupted before its answer was saved can only be sent again, which always needs a
person's yes (R24). The key travels in `x-api-key`, the API version in `anthropic-version`.

Errors, as Anthropic documents them: 529 `overloaded_error` and 503 mean the request was not
taken (retried at the request layer, nothing charged); a 500 `api_error`, 502 or 504 may come
after the model ran, so they are never resent without a yes. 429 `rate_limit_error` waits for
`retry-after` (or the `anthropic-ratelimit-*-reset` times); 401 `authentication_error` and
403 `permission_error` stop the run; a 402, or a 400 saying the credit balance is too low,
is a spent balance: the run stops and nothing is retried. Any other 400
(`invalid_request_error`) is a rejected request.
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from postledger.settings import Settings, UpstreamKind
from postledger.upstreams.anthropic_protocol import API_VERSION, message_result, messages_body
from postledger.upstreams.calls import Created, CreateRequest, NoVerdict
from postledger.upstreams.http import (
    TRANSIENT_STATUS,
    HttpUpstream,
    Timeouts,
    accepted_body,
    gateway_retries_of,
    lost_answer,
)

OVERLOADED = 529  # Anthropic's "overloaded_error": the request was not taken


def anthropic_headers(api_key: SecretStr | None) -> dict[str, str]:
    headers = {"anthropic-version": API_VERSION}
    if api_key is not None:
        headers["x-api-key"] = api_key.get_secret_value()
    return headers


class AnthropicUpstream(HttpUpstream):
    """What Anthropic's APIs share: the key in `x-api-key` beside the API version, no
    idempotency key, 529 for an overload, a base URL given as the root or with its /v1."""

    transient_statuses = TRANSIENT_STATUS | {OVERLOADED}
    statuses_that_may_charge = frozenset({500, 502, 504})
    base_url_hint = "the API's root, e.g. https://api.anthropic.com (with or without /v1)"

    @classmethod
    def options_of(cls, settings: Settings) -> dict[str, Any]:
        return {"max_tokens": settings.max_output_tokens}

    def __init__(self, base_url: str, *, max_tokens: int = 4096, **options: Any) -> None:
        super().__init__(base_url, **options)
        self.honours_keys = False  # the API takes no idempotency key
        self.max_tokens = max_tokens
        # The SDK's base URL is the root; a gateway's is often given with its /v1.
        self._v1 = "" if self.base_url.endswith("/v1") else "/v1"

    def auth_headers(self, api_key: SecretStr | None) -> dict[str, str]:
        return anthropic_headers(api_key)


class AnthropicMessagesClient(AnthropicUpstream):
    kind = UpstreamKind.ANTHROPIC_MESSAGES
    has_task_ids = False

    @classmethod
    def timeouts_of(cls, settings: Settings) -> Timeouts:
        # A synchronous answer takes as long as the model runs.
        return Timeouts(connect=settings.connect_timeout, read=settings.chat_timeout)

    async def create(self, request: CreateRequest) -> Created:
        """Send the batch as one message and return its answer (paid). An answer that is not
        a message is a lost answer: the model may have run, and been billed."""
        body = messages_body(request.model, request.analysis, request.posts, self.max_tokens)
        response = await self._send("POST", f"{self._v1}/messages", json=body)
        answer = message_result(accepted_body(response))
        if isinstance(answer, NoVerdict):
            raise lost_answer(response, answer.detail)
        return Created(None, answer, gateway_retries=gateway_retries_of(response.headers))
