"""The simulator's OpenAI chat completions, and the chat wire format its Batch API and
Anthropic faces reuse (a batch line is a chat request; its output line a chat completion).

POST /v1/chat/completions     one synchronous completion: charged, answered after the latency

A completion answers the analysis its request asks (`simulator.analyses`); a strict
`json_schema` OpenAI would refuse is refused as OpenAI does (`simulator.openai_strict`). Its
system prompt is cached as OpenAI caches it, on its own (`simulator.caching`): its usage
counts the tokens read from the cache in `prompt_tokens` and again in
`prompt_tokens_details.cached_tokens`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastapi import FastAPI, Request

from simulator.analyses import chat_item_schema
from simulator.billing import Usage
from simulator.caching import Prefix
from simulator.faults import CREATE_AFTER, CREATE_REFUSED, Route
from simulator.gateway import Made, through_gateway
from simulator.model import count_tokens
from simulator.openai_state import OpenAIState, denied, invalid, new_id
from simulator.openai_strict import refused, strict_problem
from simulator.outputs import spoiled_by
from simulator.responses import error, refusal, transport_fault
from simulator.task import SimTask, until_done


def _text_of(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def chat_input(messages: Any) -> tuple[str, list[tuple[str, str]]]:
    """(prompt, posts) of a chat request: the system messages, and the posts of the last user
    message (`{"posts": [{id, text}]}` as postledger sends; any other text is one post)."""
    messages = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    prompt = "\n".join(_text_of(m.get("content")) for m in messages if m.get("role") == "system")
    user = next(
        (_text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    try:
        posts = [(str(p["id"]), str(p["text"])) for p in json.loads(user)["posts"]]
    except (ValueError, KeyError, TypeError):
        posts = []
    return prompt, posts or [("1", user)]


def answer_text(output: str, json_mode: bool) -> str:
    """The model's text: its JSON list, wrapped as {"results": [...]} when the request asked
    for a JSON object (response_format); spoiled output is passed on as it is."""
    if not json_mode:
        return output
    try:
        items = json.loads(output)
    except ValueError:
        return output
    return json.dumps({"results": items}, ensure_ascii=False) if isinstance(items, list) else output


def completion(model: str, content: str, usage: Usage) -> dict[str, Any]:
    """A chat completion; `usage`: its tokens by class (OpenAI counts the cached input in
    `prompt_tokens`, and apart in `prompt_tokens_details`; it writes no cache)."""
    prompt_tokens = usage.input_tokens + usage.cached_input_tokens
    return {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": prompt_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        },
    }


def json_mode(body: dict[str, Any]) -> bool:
    format_ = body.get("response_format")
    return isinstance(format_, dict) and format_.get("type") in ("json_object", "json_schema")


def _completion_task(
    state: OpenAIState,
    body: dict[str, Any],
    request: Request,
    on_new: Callable[[SimTask], None] | None,
) -> SimTask:
    """The task of a chat request, made and charged (no keys: each request is new)."""
    prompt, posts = chat_input(body["messages"])
    task, _ = state.upstream.create(
        model=str(body["model"]),
        prompt=prompt,
        posts=posts,
        idempotency_key=request.headers.get("idempotency-key"),
        now=time.monotonic(),
        on_new=on_new,
        honour_key=False,
        schema=chat_item_schema(body, prompt),
        cache=Prefix(prompt),
    )
    return task


def _billed_content(state: OpenAIState, task: SimTask, body: dict[str, Any]) -> tuple[str, Usage]:
    """The answer's text and its usage; the charge is the usage the answer reports."""
    content = answer_text(task.output, json_mode(body))
    usage = replace(task.usage(), output_tokens=count_tokens(content))
    state.upstream.bill_usage(task.task_id, usage)
    return content, usage


def _completion_again(state: OpenAIState, body: dict[str, Any], request: Request) -> Made:
    """A gateway's extra attempt: a completion charged, its answer dropped."""
    task = _completion_task(state, body, request, None)
    _billed_content(state, task, body)
    return Made([task.task_id])


def add_chat_routes(app: FastAPI, state: OpenAIState) -> None:
    upstream, faults = state.upstream, state.faults

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        upstream.count_request("create")
        if not state.authorized(request):
            return denied()
        body = await request.json()
        if not isinstance(body, dict) or not body.get("model") or not body.get("messages"):
            return invalid("model and messages are required")
        if (problem := strict_problem(body)) is not None:
            return refused(problem)  # as OpenAI: before anything is made or charged
        decision = faults.decide(Route.CREATE)
        if decision is not None and decision.fault in CREATE_REFUSED:
            return refusal(decision, openai=True)
        decision = through_gateway(
            request, faults, decision, lambda: _completion_again(state, body, request)
        )
        if decision is not None and decision.fault not in CREATE_AFTER:
            return await transport_fault(decision)  # nothing was made
        if faults.decide(Route.TASK) is not None:  # the model failed: answered 500, not billed
            if decision is not None:  # nothing made: its 500 is the true answer
                faults.note(decision, made=[], applied=False)
            return error(500, "server_error", "The server had an error processing your request.")
        task = _completion_task(state, body, request, spoiled_by(faults))
        await until_done(task)
        if decision is not None:
            faults.note(decision, made=[task.task_id])
            return await transport_fault(decision)  # made and charged, the answer is lost
        content, usage = _billed_content(state, task, body)
        return completion(task.model, content, usage)
