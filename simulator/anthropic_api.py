"""The simulator's Anthropic face: the Messages API, over the same tasks, the same fault
injection and the same charge log as the task API.

POST /v1/messages   one synchronous message: charged, answered after the latency, in the
                    shape of its forced tool's `results` items (`simulator.analyses`)

It refuses what Anthropic refuses, with Anthropic's error body (`{"type": "error", "error":
{"type", "message"}}`) and a `request-id` header: no `anthropic-version` header (or one that
is not a version date), a missing or wrong key (when the simulator has one: in `x-api-key`,
or as `Authorization: Bearer`, which is how the official SDK 2.x sends it), a body without
`model`, `max_tokens` or `messages`, a field the API does not know, a "system" role among
the messages, a `tool_choice` naming a tool that was not offered. Streaming is not
simulated (refused).

Faults, in Anthropic's words: `create:http_503` is a 529 `overloaded_error` (not taken),
`http_500` a 500 `api_error`, `timeout` a 504 `timeout_error`; `rate_limit` a 429
`rate_limit_error` with `retry-after` (or, with `retry_after=reset:N`, only
`anthropic-ratelimit-requests-reset`); `auth` a 401 `authentication_error`; `permission` a
403 `permission_error`; `quota` a 400 saying the credit balance is too low; `quota_429` a 402
`billing_error`. A `task` fault is a 500 `api_error` after nothing was billed.

Its prompt cache is Anthropic's (`simulator.caching`): only a `system` of text blocks, one of
them with `cache_control`, is cached, up to that block. The usage counts apart the input
written to the cache (`cache_creation_input_tokens`), the input read from it
(`cache_read_input_tokens`) and the rest (`input_tokens`), as Anthropic's does.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from simulator.analyses import messages_item_schema
from simulator.billing import Usage
from simulator.caching import anthropic_prefix
from simulator.faults import CREATE_AFTER, CREATE_REFUSED, Decision, Faults, Route
from simulator.gateway import Made, through_gateway
from simulator.openai_chat import chat_input
from simulator.outputs import spoiled_by
from simulator.responses import transport_fault
from simulator.task import SimTask, until_done
from simulator.upstream import Upstream

# The top-level fields of a Messages API request (anything else is refused, as the API does).
KNOWN_FIELDS = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
    }
)
_VERSION = re.compile(r"20\d\d-\d\d-\d\d")
CREDIT_TOO_LOW = (
    "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
    "to upgrade or purchase credits."
)


def anthropic_error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JSONResponse(
        body, status_code=status, headers={"request-id": _new_id("req"), **(headers or {})}
    )


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def problem_of(request: Request, body: Any) -> str | None:
    """Why the Messages API would refuse this request (a 400), or None."""
    version = request.headers.get("anthropic-version")
    if not version:
        return "anthropic-version: header is required"
    if not _VERSION.fullmatch(version):
        return f"anthropic-version: {version!r} is not a valid version"
    if not isinstance(body, dict):
        return "The request body is not valid JSON."
    if unknown := sorted(set(body) - KNOWN_FIELDS):
        return f"{unknown[0]}: Extra inputs are not permitted"
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            return f"{name}: Field required"
    if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
        return "max_tokens: Input should be a valid integer greater than or equal to 1"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            return (
                f'messages.{index}: Unexpected role "system". The Messages API accepts a '
                'top-level `system` parameter, not "system" as an input message role.'
            )
        if role not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
    if body.get("stream"):
        return "stream: streaming is not simulated (the simulator answers whole messages only)"
    return _tool_problem(body)


def _tool_problem(body: dict[str, Any]) -> str | None:
    tools = body.get("tools") or []
    names = {t.get("name") for t in tools if isinstance(t, dict)}
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("input_schema"), dict):
            return f"tools.{index}.input_schema: Field required"
    forced = forced_tool(body)
    if forced is not None and forced not in names:
        return f"tool_choice: Tool '{forced}' not found in tools"
    return None


def forced_tool(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool":
        return str(choice.get("name"))
    return None


def system_text(system: Any) -> str:
    if isinstance(system, list):  # text blocks
        return "".join(b.get("text", "") for b in system if isinstance(b, dict))
    return system if isinstance(system, str) else ""


def message(model: str, output: str, tool: str | None, usage: Usage) -> dict[str, Any]:
    """The `message` answering with `output` (the model's JSON list, or spoiled text): as the
    forced tool's input when it parses, else as text (the model did not call the tool).
    `usage`: what it is billed for (its task's: the usage reported is the usage charged)."""
    content: list[dict[str, Any]]
    try:
        parsed = json.loads(output)
    except ValueError:
        parsed = None
    if tool is not None and isinstance(parsed, list | dict):
        given = {"results": parsed} if isinstance(parsed, list) else parsed
        content = [{"type": "tool_use", "id": _new_id("toolu"), "name": tool, "input": given}]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": output}]
        stop = "end_turn" if parsed is not None else "max_tokens"
    return {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cached_input_tokens,
        },
    }


def refused(decision: Decision) -> Response:
    """A refused request, nothing made or charged, as Anthropic answers it."""
    fault = decision.fault
    if fault == "rate_limit":
        value = decision.rule.retry_after
        headers: dict[str, str] = {}
        if value.startswith("date:"):
            headers["retry-after"] = formatdate(time.time() + float(value[5:]), usegmt=True)
        elif value.startswith("reset:"):  # only the anthropic-ratelimit-*-reset time
            at = datetime.now(UTC) + timedelta(seconds=float(value[6:]))
            headers["anthropic-ratelimit-requests-reset"] = at.isoformat().replace("+00:00", "Z")
        elif value == "garbage":
            headers["retry-after"] = "soon-ish"
        elif value != "missing":
            headers["retry-after"] = value
        return anthropic_error(
            429, "rate_limit_error", "This request would exceed your rate limit.", headers
        )
    if fault == "auth":
        return anthropic_error(401, "authentication_error", "invalid x-api-key")
    if fault == "quota":
        return anthropic_error(400, "invalid_request_error", CREDIT_TOO_LOW)
    if fault == "quota_429":
        return anthropic_error(402, "billing_error", CREDIT_TOO_LOW)
    return anthropic_error(403, "permission_error", "Your API key does not have permission.")


async def before_create(decision: Decision | None) -> Response | None:
    """The answer of a create fault that fires before anything is made: a refusal, or a
    transport fault. None: the create goes on (a fault after it is the caller's)."""
    if decision is None:
        return None
    if decision.fault in CREATE_REFUSED:
        return refused(decision)
    if decision.fault not in CREATE_AFTER:
        return await transport_fault(decision, status_answer)  # nothing was made
    return None


def status_answer(status: int) -> Response:
    """A server-side status in Anthropic's words: its overload is a 529."""
    if status == 503:
        return anthropic_error(529, "overloaded_error", "Overloaded")
    if status == 504:
        return anthropic_error(504, "timeout_error", "Request timed out.")
    return anthropic_error(status, "api_error", f"Simulated HTTP {status}.")


def add_anthropic_routes(
    app: FastAPI, upstream: Upstream, faults: Faults, key_matches: Callable[[str], bool]
) -> None:
    def message_task(body: dict[str, Any], on_new: Callable[[SimTask], None] | None) -> SimTask:
        """The task of a Messages API request, made and charged."""
        system = {"role": "system", "content": system_text(body.get("system"))}
        prompt, posts = chat_input([system, *body["messages"]])
        task, _ = upstream.create(
            model=str(body["model"]),
            prompt=prompt,
            posts=posts,
            idempotency_key=None,
            now=time.monotonic(),
            on_new=on_new,
            honour_key=False,
            schema=messages_item_schema(body),
            cache=anthropic_prefix(body.get("system")),
        )
        return task

    @app.post("/v1/messages")
    async def messages(request: Request) -> Any:
        upstream.count_request("create")
        given = request.headers.get("x-api-key") or request.headers.get(
            "authorization", ""
        ).removeprefix("Bearer ")
        if not key_matches(given):
            return anthropic_error(401, "authentication_error", "invalid x-api-key")
        try:
            body = await request.json()
        except ValueError:
            body = None
        if (problem := problem_of(request, body)) is not None:
            return anthropic_error(400, "invalid_request_error", problem)
        decision = faults.decide(Route.CREATE)
        # A gateway's extra attempt: a message charged, its answer dropped.
        decision = through_gateway(
            request, faults, decision, lambda: Made([message_task(body, None).task_id])
        )
        if (early := await before_create(decision)) is not None:
            return early
        if faults.decide(Route.TASK) is not None:  # the model failed: nothing billed
            if decision is not None:  # nothing made: its 500 is the true answer
                faults.note(decision, made=[], applied=False)
            return anthropic_error(500, "api_error", "Internal server error")
        task = message_task(body, spoiled_by(faults))
        await until_done(task)
        if decision is not None:
            faults.note(decision, made=[task.task_id])
            return await transport_fault(decision, status_answer)  # made and charged, lost
        answer = message(task.model, task.output, forced_tool(body), task.usage())
        return JSONResponse(answer, headers={"request-id": _new_id("req")})
