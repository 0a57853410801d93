"""OpenAI-compatible chat completions (`POST {base}/chat/completions`): OpenAI, Azure OpenAI's
v1 API, DeepSeek, Together, vLLM, Ollama and others.

One request per batch, answered synchronously: `create` returns the finished result, and there
is no upstream task id. So a request interrupted before its answer was saved can only be sent
again — and the upstream does not honour idempotency keys — which always needs a person's yes
(R24). A 503 (overloaded, unavailable) means the request was not taken: it is retried at the
request layer. A 500, 502 or 504 may come after the model ran and was billed (a gateway
timing out in front of a backend that finished), and a request that got no answer at all
(reset, timeout) may have been billed too: neither is ever resent without a person's yes.
Behind a gateway (a LiteLLM proxy), the gateway's own retries are turned off on every request
(`x-litellm-num-retries: 0`), and the retries it reports making anyway are in
`Created.gateway_retries` (or the error's `gateway_retries`). A 404 means a wrong base URL
(`EndpointNotFound`): it must include the version path, e.g. https://api.openai.com/v1.
"""

from __future__ import annotations

from typing import Any

from postledger.settings import Settings, UpstreamKind
from postledger.upstreams.calls import Created, CreateRequest, NoVerdict
from postledger.upstreams.http import (
    HttpUpstream,
    Timeouts,
    accepted_body,
    gateway_retries_of,
    lost_answer,
)
from postledger.upstreams.openai_protocol import chat_body, completion_result


class OpenAIChatClient(HttpUpstream):
    kind = UpstreamKind.OPENAI_CHAT
    version_path = "/v1"  # as the openai SDK's base_url
    has_task_ids = False
    statuses_that_may_charge = frozenset({500, 502, 504})
    base_url_hint = "the base URL with its version path, e.g. https://api.openai.com/v1"

    @classmethod
    def timeouts_of(cls, settings: Settings) -> Timeouts:
        # A synchronous answer takes as long as the model runs.
        return Timeouts(connect=settings.connect_timeout, read=settings.chat_timeout)

    @classmethod
    def options_of(cls, settings: Settings) -> dict[str, Any]:
        return {"json_schema": settings.json_schema}

    def __init__(self, base_url: str, *, json_schema: bool = True, **options: Any) -> None:
        super().__init__(base_url, **options)
        self.honours_keys = False  # whatever was configured: no keys, no task to find again
        self.json_schema = json_schema

    async def create(self, request: CreateRequest) -> Created:
        """Send the batch as one chat completion and return its answer (paid). An answer that
        is not a completion is a lost answer: the model may have run, and been billed."""
        body = chat_body(request.model, request.analysis, request.posts, self.json_schema)
        response = await self._send("POST", "/chat/completions", json=body)
        answer = completion_result(accepted_body(response))
        if isinstance(answer, NoVerdict):
            raise lost_answer(response, answer.detail)
        return Created(None, answer, gateway_retries=gateway_retries_of(response.headers))
