"""A user's analysis on the wire: the OpenAI requests of a month asked the support triage
follow OpenAI's OpenAPI document (the suite's proxy), the Anthropic requests are what the
official SDK's types accept, and the official clients get answers in the triage's shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from anthropic.types.messages.batch_create_params import Request
from pydantic import TypeAdapter, ValidationError

from postledger.analysis import Analysis, load_analysis
from postledger.ledger import Ledger
from postledger.record.models import PostStatus
from postledger.upstreams.anthropic_protocol import TOOL_NAME, messages_body
from postledger.upstreams.openai_protocol import chat_body
from tests.support.months import MONTH, posts_file
from tests.support.openai_spec import checked_by_openai_spec
from tests.support.repo import REPO
from tests.support.simulators import Sim, simulator_process

pytestmark = pytest.mark.usefixtures("fast_retries")
SIMULATOR = {"latency": 0.05}  # the `faulty` fixture's
TRIAGE = REPO / "examples" / "support_triage.json"
POSTS = [("a", "I was charged twice, please refund!"), ("b", "Love the new app, thanks.")]


def triage() -> Analysis:
    return load_analysis(str(TRIAGE))


@pytest.mark.parametrize(
    ("kind", "json_schema"),
    [("openai_chat", "true"), ("openai_chat", "false"), ("openai_batch", "true")],
)
@pytest.mark.parametrize("faulty", [None], indirect=True)
def test_a_month_asked_the_triage_follows_openais_openapi_document(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    json_schema: str,
) -> None:
    from flows.monthly import monthly_posts

    monkeypatch.setenv("POSTLEDGER_ANALYSIS", str(TRIAGE))
    monkeypatch.setenv("POSTLEDGER_JSON_SCHEMA", json_schema)
    posts = posts_file(tmp_path / f"{MONTH}.jsonl", 30)
    with checked_by_openai_spec(faulty.url) as proxy:
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_URL", f"{proxy.url}/v1")
        monthly_posts(month=MONTH, posts_path=str(posts))

    assert proxy.problems == [], "\n".join(proxy.problems)
    assert sum(proxy.operations.values()) > 0
    analysis = triage()
    for post in ledger.posts(MONTH):
        assert post.status is PostStatus.COMPLETED
        assert post.result is not None and analysis.check(post.result) == post.result


def validated(adapter: TypeAdapter[Any], value: Any) -> Any:
    """`value` checked by the SDK's types, all of it: pydantic checks an `Iterable` field
    lazily, as it is iterated, so every iterable in the answer is walked here."""
    checked = adapter.validate_python(value)
    return _walked(checked)


def _walked(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _walked(item) for key, item in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    try:
        return [_walked(item) for item in value]
    except TypeError:
        return value


def test_the_anthropic_requests_of_a_custom_analysis_are_valid_for_the_official_sdk() -> None:
    body = messages_body("claude-haiku-4-5", triage(), POSTS, max_tokens=2048)
    message = TypeAdapter(MessageCreateParamsNonStreaming)
    checked = validated(message, body)
    (tool,) = checked["tools"]
    items = tool["input_schema"]["properties"]["results"]["items"]
    assert items["required"] == ["id", *triage().field_names]
    assert checked["tool_choice"] == {"type": "tool", "name": TOOL_NAME}
    validated(TypeAdapter(Request), {"custom_id": "2026-10-b0001", "params": body})

    # A check that could not fail would prove nothing: a tool without its schema is refused.
    broken = {**body, "tools": [{"name": TOOL_NAME}]}
    with pytest.raises(ValidationError):
        validated(message, broken)


def test_the_official_clients_get_answers_in_the_analysiss_shape() -> None:
    analysis = triage()
    with simulator_process(latency=0.05) as url:
        sent = messages_body("sim-analyst-1", analysis, POSTS, max_tokens=2048)
        answer = anthropic.Anthropic(
            base_url=url, api_key="fake-key-any", max_retries=0
        ).messages.create(**sent)
        (block,) = answer.content
        assert block.type == "tool_use"
        by_anthropic = block.input["results"]

        asked = chat_body("sim-analyst-1", analysis, POSTS, json_schema=True)
        completion = openai.OpenAI(
            base_url=f"{url}/v1", api_key="fake-key-any", max_retries=0
        ).chat.completions.create(**asked)
        content = completion.choices[0].message.content
        assert content is not None
        by_openai = json.loads(content)["results"]

    for items in (by_anthropic, by_openai):
        assert [item["id"] for item in items] == [post_id for post_id, _ in POSTS]
        for item in items:
            result = {k: v for k, v in item.items() if k != "id"}
            assert analysis.check(result) == result
    assert by_anthropic == by_openai  # the same posts, the same analysis: the same answers
