"""The analysis a request asks for: the item schema each face carries, read as postledger
reads an analysis (`postledger.analysis.read_schema`), so that the simulator knows the same
five kinds of field and answers in the request's own shape.

Where each face carries the schema of one post's answer (its "item"):
- the task API: the body's `schema`;
- OpenAI chat (and each Batch API line): `response_format.json_schema.schema`'s
  `results.items`; in JSON mode, the system message's line after `SCHEMA_LINE`;
- Anthropic Messages (and each Message Batches request): the forced tool's `input_schema`'s
  `results.items`.

A request without one, or with one the reader refuses, is asked the default analysis (older
clients sent none).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from postledger.analysis import (
    DEFAULT,
    ITEM_ID,
    Analysis,
    EnumField,
    TextField,
    load_analysis,
    read_schema,
)
from postledger.analysis.default import Category, Sentiment
from postledger.upstreams.openai_protocol import SCHEMA_LINE  # postledger's JSON-mode marker
from simulator.answers import SUMMARY_CHARS

# OpenAI's strict mode takes no length keywords: postledger says a text bound in words there.
_SAID_BOUND = re.compile(r"\((?:at least (\d+) and )?at most (\d+) characters\)\s*$")
DEFAULT_ANALYSIS = load_analysis(DEFAULT)


def results_items(schema: Any) -> dict[str, Any] | None:
    """The item schema inside an answer's schema (`{"results": {"items": ITEM}}`)."""
    try:
        items = schema["properties"]["results"]["items"]
    except (KeyError, TypeError):
        return None
    return items if isinstance(items, dict) else None


def chat_item_schema(body: dict[str, Any], prompt: str) -> dict[str, Any] | None:
    """The item schema of an OpenAI chat request; `prompt`: its system messages."""
    format_ = body.get("response_format")
    if isinstance(format_, dict) and format_.get("type") == "json_schema":
        spec = format_.get("json_schema")
        return results_items(spec.get("schema")) if isinstance(spec, dict) else None
    for line in prompt.splitlines():
        if line.startswith(SCHEMA_LINE):
            try:
                found = json.loads(line.removeprefix(SCHEMA_LINE))
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def messages_item_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The item schema of an Anthropic Messages request: its forced tool's (or, none forced,
    its first tool's) input schema."""
    tools = [tool for tool in body.get("tools") or [] if isinstance(tool, dict)]
    choice = body.get("tool_choice")
    forced = choice.get("name") if isinstance(choice, dict) else None
    chosen = next((tool for tool in tools if tool.get("name") == forced), None)
    chosen = chosen or (tools[0] if tools else None)
    return None if chosen is None else results_items(chosen.get("input_schema"))


def analysis_of(item_schema: Any) -> Analysis:
    """The analysis an item schema describes; the default one when there is none, or the
    reader refuses it."""
    if not isinstance(item_schema, dict):
        return DEFAULT_ANALYSIS
    try:
        # In the request's own key order: the answer's fields come in the schema's order.
        key = json.dumps(item_schema)
    except (TypeError, ValueError):
        return DEFAULT_ANALYSIS
    return _read(key)


@functools.lru_cache(maxsize=64)
def _read(key: str) -> Analysis:
    # Every request of a run carries the same schema: it is read once, not once per request.
    item = json.loads(key)
    properties, required = item.get("properties"), item.get("required")
    if not isinstance(properties, dict) or not isinstance(required, list):
        return DEFAULT_ANALYSIS
    document = {
        **item,
        "properties": {k: _bounded(v) for k, v in properties.items() if k != ITEM_ID},
        "required": [name for name in required if name != ITEM_ID],
    }
    try:
        return read_schema(document, "the request's schema", name="analysis")
    except Exception:  # noqa: BLE001 - whatever a client sent: unreadable is the default
        return DEFAULT_ANALYSIS


def _bounded(node: Any) -> Any:
    """A text field's node with its bounds as `maxLength` (and `minLength`), where they are
    said in words only (OpenAI's strict form)."""
    if not isinstance(node, dict) or node.get("type") != "string" or "enum" in node:
        return node
    if "maxLength" in node or not isinstance(node.get("description"), str):
        return node
    said = _SAID_BOUND.search(node["description"])
    if said is None:
        return node
    least, most = said.groups()
    return {**node, "maxLength": int(most), **({"minLength": int(least)} if least else {})}


@functools.lru_cache(maxsize=64)
def is_default(analysis: Analysis) -> bool:
    """The default analysis's fields (its category, sentiment and summary, with their values),
    which are answered exactly as before any analysis could be chosen."""
    fields = {field.name: field for field in analysis.fields}
    if set(fields) != {"category", "sentiment", "summary"}:
        return False
    category, sentiment, summary = fields["category"], fields["sentiment"], fields["summary"]
    return (
        isinstance(category, EnumField)
        and set(category.values) == {c.value for c in Category}
        and isinstance(sentiment, EnumField)
        and set(sentiment.values) == {s.value for s in Sentiment}
        and isinstance(summary, TextField)
        # The default answer's summary is up to SUMMARY_CHARS long: a bound below that is
        # another analysis, answered within its own bound.
        and summary.max_length >= SUMMARY_CHARS
        and summary.min_length <= 1
    )
