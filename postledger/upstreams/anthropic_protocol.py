"""What Anthropic's Messages API looks like from here: the request body for a batch of posts,
and the result read back from a `message` object.

The answer comes as a forced tool call: the request offers one tool whose input schema is the
list of analyses and tells the model to call it (`tool_choice`), so the tool call's `input` is
the structured answer, with no prose around it. The Messages API has no response_format.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from postledger.analysis import Analysis
from postledger.guards.usage import anthropic_usage
from postledger.upstreams.calls import Delivered, NoVerdict, NoVerdictReason, UpstreamFailed
from postledger.upstreams.openai_protocol import results_schema

# The API version every request names (the `anthropic-version` header): the one the Messages
# API and Message Batches are documented against.
API_VERSION = "2023-06-01"

TOOL_NAME = "record_post_analyses"


def tool(analysis: Analysis) -> dict[str, Any]:
    """The one tool the model must call: its input is the answer, in the analysis's shape."""
    return {
        "name": TOOL_NAME,
        "description": "Record the analysis of every post, one item per post, with the post's id.",
        "input_schema": results_schema(analysis),
    }


def messages_body(
    model: str, analysis: Analysis, posts: Sequence[tuple[str, str]], max_tokens: int
) -> dict[str, Any]:
    """One Messages API request for these posts: the analysis's instructions as the system
    prompt, the posts as a JSON user message, the answer through the one tool the model must
    call.

    The instructions (with the tool before them, in Anthropic's order) are the same for every
    batch of a month, and the posts come after them: the system prompt is marked as the
    prompt cache's breakpoint, so that long instructions are read from the cache (at a tenth
    of the input price) instead of paid in full by each batch. Under the model's minimum
    (1 024 tokens or more) Anthropic ignores the mark and bills nothing for it."""
    user = {"posts": [{"id": post_id, "text": text} for post_id, text in posts]}
    system = f"{analysis.instructions}\n\nAnswer by calling the tool {TOOL_NAME} once."
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": json.dumps(user, ensure_ascii=False)}],
        "tools": [tool(analysis)],
        "tool_choice": {"type": "tool", "name": TOOL_NAME},
    }


def message_usage(body: Any) -> dict[str, int] | None:
    """The usage in the ledger's words: cache reads and writes apart from fresh input, each
    billed at its own rate."""
    return anthropic_usage(body.get("usage") if isinstance(body, dict) else None)


def message_result(body: Any) -> Delivered | UpstreamFailed | NoVerdict:
    """What a `message` says: the tool call's input as JSON text, the output to check
    (`postledger.batches.output.check_output`). A message that answered in text instead was
    still paid for: its text is the output, and checking it says what is wrong. A message
    with neither is the upstream's answer without an output, billed, with its usage; a body
    that is not a message at all is no verdict."""
    usage = message_usage(body)
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, list):
        return NoVerdict(NoVerdictReason.NOT_THE_ANSWER, "the answer is not a message")
    for block in content:
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_use"
            and block.get("name") == TOOL_NAME
            and isinstance(block.get("input"), dict)
        ):
            return Delivered(json.dumps(block["input"], ensure_ascii=False), usage)
    text = "".join(
        str(block.get("text", ""))
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    ).strip()
    if text:
        return Delivered(text, usage)
    why = f"no call of {TOOL_NAME} and no text (stop_reason {body.get('stop_reason')!r})"
    return UpstreamFailed(why, billed=True, usage=usage)
