"""What the OpenAI chat completions protocol looks like from here: the request body for a
batch of posts, and the result read back from a `chat.completion` object."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from postledger.analysis import Analysis
from postledger.guards.usage import openai_usage
from postledger.upstreams.calls import Delivered, NoVerdict, NoVerdictReason, UpstreamFailed

# Appended to the configured prompt: response_format asks for a JSON *object*, so the list of
# analyses travels as {"results": [...]}, which `postledger.batches.output.check_output` unwraps.
ENVELOPE = (
    'Wrap the list in one JSON object: {"results": [...]}, one item per post, with the post\'s id.'
)

# In JSON mode (no schema to hold the model to), the answer's schema travels in the system
# message, on one line after these words.
SCHEMA_LINE = "Each item must match this JSON Schema: "


def results_schema(analysis: Analysis, *, strict: bool = False) -> dict[str, Any]:
    """The answer's JSON Schema: one object holding the list of every post's answer."""
    return {
        "type": "object",
        "properties": {"results": {"type": "array", "items": analysis.item_schema(strict=strict)}},
        "required": ["results"],
        "additionalProperties": False,
    }


def response_format(analysis: Analysis, json_schema: bool) -> dict[str, Any]:
    """Structured outputs where the server supports them, JSON mode otherwise. Strict mode
    takes no length keywords: there a text field's bound is said in its description."""
    if not json_schema:
        return {"type": "json_object"}
    schema = results_schema(analysis, strict=True)
    return {
        "type": "json_schema",
        "json_schema": {"name": "post_analyses", "strict": True, "schema": schema},
    }


def chat_body(
    model: str, analysis: Analysis, posts: Sequence[tuple[str, str]], json_schema: bool
) -> dict[str, Any]:
    """One chat completion request for these posts: the analysis's instructions as the system
    message (with the answer's schema, in JSON mode), the posts as a JSON user message."""
    user = {"posts": [{"id": post_id, "text": text} for post_id, text in posts]}
    system = analysis.instructions
    if not json_schema:
        item = json.dumps(analysis.item_schema(), ensure_ascii=False, separators=(",", ":"))
        system = f"{system}\n\n{SCHEMA_LINE}{item}"
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": f"{system}\n\n{ENVELOPE}"},
            {"role": "user", "content": json.dumps(user, ensure_ascii=False)},
        ],
        "response_format": response_format(analysis, json_schema),
    }


def completion_result(body: Any) -> Delivered | UpstreamFailed | NoVerdict:
    """What a `chat.completion` says: its text (`choices[0].message.content`) as the output
    with the usage in the ledger's words (`postledger.guards.usage`); the upstream's answer with no
    text (a refusal, a cut-off), billed, with its usage; or no verdict when the body is not
    a completion at all."""
    usage = openai_usage(body.get("usage") if isinstance(body, dict) else None)
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return NoVerdict(NoVerdictReason.NOT_THE_ANSWER, "the answer is not a chat completion")
    message = choices[0].get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str) and content:
        return Delivered(content, usage)
    refusal = message.get("refusal") if isinstance(message, dict) else None
    reason = choices[0].get("finish_reason")
    why = f"no content (finish_reason {reason!r}{f': {refusal}' if refusal else ''})"
    return UpstreamFailed(why, billed=True, usage=usage)


def batch_line(line: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    """(body, error) of one line of a Batch API output or error file: the chat completion
    its request answered with, or the error that stands in for it."""
    response = line.get("response")
    body = response.get("body") if isinstance(response, dict) else None
    if not line.get("error") and isinstance(response, dict) and response.get("status_code") == 200:
        return body, None
    error = line.get("error") or (body or {}).get("error")
    return None, error if isinstance(error, dict) else {}


def request_error(error: dict[str, Any], status: str) -> str:
    """A failed Batch API request's code and message, as the ledger says them."""
    if error.get("code") or error.get("message"):
        return f"{error.get('code') or error.get('type')}: {error.get('message')}"
    return f"the request failed (batch {status})"
