"""OpenAI batches that postledger made before it sent one request line per ledger batch: one
line per post, `custom_id` = the post id. An upstream batch runs for up to 24 hours, so one made
before an upgrade can still be polled (or adopted) after it: it is settled as it was sent,
each line answering for its own post, and its usage summed over every line (all billed)."""

from __future__ import annotations

import json
from typing import Any

from postledger.guards.usage import Usage, usage_of
from postledger.upstreams.calls import Delivered, UpstreamFailed
from postledger.upstreams.openai_protocol import batch_line, completion_result, request_error


def assemble(lines: list[dict[str, Any]], status: str) -> tuple[str, dict[str, int] | None]:
    """The batch's raw output as the ledger keeps it: one JSON list with the items of every
    post's answer, and an `{"id", "error"}` item for each post whose request failed (which
    validation turns into that post's failure reason). Usage summed over the answers."""
    items: list[Any] = []
    used: Usage | None = None
    for line in lines:
        post_id = line["custom_id"]
        body, error = batch_line(line)
        if error is not None:
            items.append({"id": post_id, "error": request_error(error, status)})
            continue
        answer = completion_result(body)
        usage = answer.usage if isinstance(answer, Delivered | UpstreamFailed) else None
        if (line_usage := usage_of(usage)) is not None:
            used = line_usage if used is None else used + line_usage
        if not isinstance(answer, Delivered):
            why = answer.reason if isinstance(answer, UpstreamFailed) else answer.detail
            items.append({"id": post_id, "error": why})
            continue
        content = answer.output
        try:
            parsed = json.loads(content)
        except ValueError:
            items.append({"id": post_id, "error": f"the answer is not JSON: {content[:200]!r}"})
            continue
        items.append(_answer_for(post_id, parsed, content))
    return json.dumps(items, ensure_ascii=False), used.words() if used is not None else None


def _answer_for(post_id: str, parsed: Any, content: str) -> dict[str, Any]:
    """The one item a line answers for its own post (its custom_id). The model's text decides
    nothing else: an answer that names another post — a slip, or an instruction hidden in a
    post's text — is this post's error, never that other post's result."""
    if isinstance(parsed, dict) and isinstance(parsed.get("results"), list):
        parsed = parsed["results"]
    if isinstance(parsed, list) and len(parsed) == 1:
        parsed = parsed[0]
    if not isinstance(parsed, dict):
        return {"id": post_id, "error": f"the answer is not one item: {content[:200]!r}"}
    if parsed.get("id") != post_id:
        return {"id": post_id, "error": f"the answer names post {parsed.get('id')!r}, not this one"}
    return parsed
