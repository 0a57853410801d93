"""The simulator answers the analysis a request asks, in its shape, on each of its five faces,
over loopback HTTP: the item schema carried as postledger carries it (the task API's
`schema`, OpenAI's strict `json_schema` or JSON mode's schema line, Anthropic's forced tool),
the same answer twice, and its output faults spoiling an answer in that shape."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from postledger.analysis import Analysis, read_schema
from postledger.upstreams.openai_protocol import SCHEMA_LINE
from simulator.model import write_output
from tests.support.simulators import simulator_process

LATENCY = 0.01
MODEL = "sim-analyst-1"
ANTHROPIC = {"anthropic-version": "2023-06-01"}
TOOL = "record_post_analyses"
POSTS = [
    ("p1", "I was charged twice this month! Please refund me."),
    ("p2", "Where is my parcel? It is three weeks late."),
    ("p3", "How do I change the email on my account?"),
]
HTTP = httpx.Client(timeout=10)


def _enum(values: list[str], said: str) -> dict[str, Any]:
    return {"type": "string", "enum": values, "description": said}


TRIAGE = read_schema(
    {
        "title": "support_triage",
        "description": "Triage each support post.",
        "type": "object",
        "properties": {
            "product_area": _enum(["billing", "shipping", "account", "product", "other"], "Area."),
            "urgency": _enum(["low", "normal", "high", "urgent"], "How urgent it is."),
            "needs_reply": {"type": "boolean", "description": "Whether to answer it."},
            "summary": {"type": "string", "maxLength": 200, "description": "One sentence."},
        },
        "required": ["product_area", "urgency", "needs_reply", "summary"],
        "additionalProperties": False,
    },
    "the test",
    name="support_triage",
)
# No text field: its spoils must not count on one.
SCORES = read_schema(
    {
        "description": "Score each post.",
        "type": "object",
        "properties": {
            "stars": {"type": "integer", "minimum": 1, "maximum": 5, "description": "Stars."},
            "topics": {
                "type": "array",
                "items": {"type": "string", "enum": ["price", "speed", "support"]},
                "minItems": 1,
                "maxItems": 2,
                "description": "Topics.",
            },
        },
        "required": ["stars", "topics"],
    },
    "the test",
    name="scores",
)


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with simulator_process(latency=LATENCY) as url:
        yield url


def reset(url: str, faults: str | None = None) -> None:
    options = {"latency": LATENCY, "faults": faults}
    HTTP.post(f"{url}/_sim/reset", json=options).raise_for_status()


def results_schema(analysis: Analysis, *, strict: bool = False) -> dict[str, Any]:
    items = analysis.item_schema(strict=strict)
    return {
        "type": "object",
        "properties": {"results": {"type": "array", "items": items}},
        "required": ["results"],
        "additionalProperties": False,
    }


def _user(posts: list[tuple[str, str]]) -> dict[str, str]:
    content = {"posts": [{"id": post_id, "text": text} for post_id, text in posts]}
    return {"role": "user", "content": json.dumps(content)}


def chat_body(analysis: Analysis, posts: list[tuple[str, str]], strict: bool) -> dict[str, Any]:
    system = analysis.instructions
    if strict:
        schema = results_schema(analysis, strict=True)
        spec = {"name": "post_analyses", "strict": True, "schema": schema}
        response_format: dict[str, Any] = {"type": "json_schema", "json_schema": spec}
    else:
        item = json.dumps(analysis.item_schema(), separators=(",", ":"))
        system = f"{system}\n\n{SCHEMA_LINE}{item}"
        response_format = {"type": "json_object"}
    messages = [{"role": "system", "content": system}, _user(posts)]
    return {"model": MODEL, "messages": messages, "response_format": response_format}


def messages_body(analysis: Analysis, posts: list[tuple[str, str]]) -> dict[str, Any]:
    tool = {"name": TOOL, "description": "Record.", "input_schema": results_schema(analysis)}
    return {
        "model": MODEL,
        "max_tokens": 4096,
        "system": analysis.instructions,
        "messages": [_user(posts)],
        "tools": [tool],
        "tool_choice": {"type": "tool", "name": TOOL},
    }


def until(read: Callable[[], dict[str, Any]], ended: Callable[[dict[str, Any]], bool]) -> Any:
    for _ in range(200):
        body = read()
        if ended(body):
            return body
        time.sleep(0.05)
    raise AssertionError(f"never ended: {body}")


# --- each face: the items of one request (or batch) for every post ------------------------------


def task_output(url: str, schema: dict[str, Any]) -> str:
    posts = [{"id": post_id, "text": text} for post_id, text in POSTS]
    body = {"model": MODEL, "prompt": "p", "schema": schema, "posts": posts}
    task_id = HTTP.post(f"{url}/v1/tasks", json=body).raise_for_status().json()["task_id"]
    output: str = HTTP.get(f"{url}/v1/tasks/{task_id}", params={"wait": 5}).json()["output"]
    return output


def via_task_api(url: str, analysis: Analysis) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(task_output(url, analysis.item_schema()))
    return items


def via_chat(url: str, analysis: Analysis, *, strict: bool = True) -> list[dict[str, Any]]:
    answer = HTTP.post(f"{url}/v1/chat/completions", json=chat_body(analysis, POSTS, strict))
    content = answer.raise_for_status().json()["choices"][0]["message"]["content"]
    items: list[dict[str, Any]] = json.loads(content)["results"]
    return items


def via_openai_batch(url: str, analysis: Analysis) -> list[dict[str, Any]]:
    """Two lines: the first post alone, then the other two."""
    lines = [
        {"custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        for n, body in enumerate(
            [chat_body(analysis, POSTS[:1], True), chat_body(analysis, POSTS[1:], True)]
        )
    ]
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    upload = HTTP.post(
        f"{url}/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"}
    )
    asked = {"input_file_id": upload.json()["id"], "endpoint": "/v1/chat/completions"}
    made = HTTP.post(f"{url}/v1/batches", json={**asked, "completion_window": "24h"}).json()
    batch = until(
        lambda: HTTP.get(f"{url}/v1/batches/{made['id']}").json(),
        lambda body: body["status"] == "completed",
    )
    output = HTTP.get(f"{url}/v1/files/{batch['output_file_id']}/content").content
    items = []
    for line in output.splitlines():
        message = json.loads(line)["response"]["body"]["choices"][0]["message"]
        items += json.loads(message["content"])["results"]
    return items


def via_messages(url: str, analysis: Analysis) -> list[dict[str, Any]]:
    body = messages_body(analysis, POSTS)
    answer = HTTP.post(f"{url}/v1/messages", json=body, headers=ANTHROPIC).raise_for_status()
    (call,) = answer.json()["content"]
    assert call["type"] == "tool_use" and call["name"] == TOOL
    items: list[dict[str, Any]] = call["input"]["results"]
    return items


def via_message_batch(url: str, analysis: Analysis) -> list[dict[str, Any]]:
    requests = [
        {"custom_id": f"r{n}", "params": messages_body(analysis, [post])}
        for n, post in enumerate(POSTS)
    ]
    made = HTTP.post(f"{url}/v1/messages/batches", json={"requests": requests}, headers=ANTHROPIC)
    batch_id = made.raise_for_status().json()["id"]
    until(
        lambda: HTTP.get(f"{url}/v1/messages/batches/{batch_id}", headers=ANTHROPIC).json(),
        lambda body: body["processing_status"] == "ended",
    )
    results = HTTP.get(f"{url}/v1/messages/batches/{batch_id}/results", headers=ANTHROPIC)
    items = []
    for line in results.content.splitlines():
        (call,) = json.loads(line)["result"]["message"]["content"]
        items += call["input"]["results"]
    return items


FACES: dict[str, Callable[[str, Analysis], list[dict[str, Any]]]] = {
    "task_api": via_task_api,
    "openai_chat": via_chat,
    "openai_chat_json_mode": lambda url, analysis: via_chat(url, analysis, strict=False),
    "openai_batch": via_openai_batch,
    "anthropic_messages": via_messages,
    "anthropic_batch": via_message_batch,
}


@pytest.mark.parametrize("face", FACES)
def test_each_face_answers_the_analysis_asked_in_its_shape_the_same_twice(
    sim: str, face: str
) -> None:
    reset(sim)
    items = FACES[face](sim, TRIAGE)
    assert [item["id"] for item in items] == [post_id for post_id, _ in POSTS]
    for item in items:
        assert list(item) == ["id", "product_area", "urgency", "needs_reply", "summary"]
        assert isinstance(TRIAGE.check(item), dict), TRIAGE.check(item)
    assert items[1]["summary"] == "Where is my parcel?"  # the post's first sentence
    assert FACES[face](sim, TRIAGE) == items
    assert FACES["task_api"](sim, TRIAGE) == items  # every face: the same model


@pytest.mark.parametrize("face", FACES)
def test_each_face_answers_an_analysis_of_other_kinds_within_its_bounds(
    sim: str, face: str
) -> None:
    reset(sim)
    items = FACES[face](sim, SCORES)
    for item in items:
        assert list(item) == ["id", "stars", "topics"]
        assert isinstance(SCORES.check(item), dict), SCORES.check(item)


def test_the_default_analysis_asked_by_its_schema_is_answered_as_without_one(sim: str) -> None:
    from postledger.analysis import load_analysis

    reset(sim)
    default = load_analysis(None)
    assert task_output(sim, default.item_schema()) == write_output(POSTS)  # byte for byte
    assert via_chat(sim, default) == json.loads(write_output(POSTS))


def test_a_repeat_under_the_same_key_with_another_schema_is_a_conflict(sim: str) -> None:
    reset(sim)
    posts = [{"id": post_id, "text": text} for post_id, text in POSTS]
    body = {"model": MODEL, "prompt": "p", "schema": TRIAGE.item_schema(), "posts": posts}
    key = {"Idempotency-Key": "k-schema"}
    first = HTTP.post(f"{sim}/v1/tasks", json=body, headers=key)
    again = HTTP.post(f"{sim}/v1/tasks", json=body, headers=key)
    assert first.json()["task_id"] == again.json()["task_id"]
    other = HTTP.post(f"{sim}/v1/tasks", json={**body, "schema": SCORES.item_schema()}, headers=key)
    assert other.status_code == 422


# --- output faults, in the analysis's shape ----------------------------------------------------

SPOILED = {
    "bad_field": 'urgency: "ecstatic" is not one of low, normal, high, urgent',
    "missing_field": "product_area: missing",
    "long_string": "summary: 201 characters, more than the 200 allowed",
}


def spoiled_item(url: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    (entry,) = HTTP.get(f"{url}/_sim/faults").json()["fired"]
    (item,) = [item for item in items if item.get("id") == entry["post_id"]]
    return item


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("fault", SPOILED)
def test_an_output_fault_spoils_one_item_in_the_analysis_shape(
    sim: str, face: str, fault: str
) -> None:
    reset(sim, f"output:{fault}#1")
    items = FACES[face](sim, TRIAGE)
    item = spoiled_item(sim, items)
    assert TRIAGE.check(item) == SPOILED[fault]
    others = [other for other in items if other is not item]
    assert others and all(isinstance(TRIAGE.check(other), dict) for other in others)


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("bad_field", 'topics: "ecstatic" is not one of price, speed, support'),
        ("long_string", 'topics: "ecstatic" is not one of price, speed, support'),
        ("missing_field", "stars: missing"),
    ],
)
def test_with_no_enum_or_text_field_a_fault_spoils_another_field(
    sim: str, fault: str, said: str
) -> None:
    reset(sim, f"output:{fault}#1")
    items = via_task_api(sim, SCORES)
    assert SCORES.check(spoiled_item(sim, items)) == said


def test_a_duplicate_answer_and_a_wrong_shape_use_the_analysis_fields(sim: str) -> None:
    reset(sim, "output:duplicate_id#1")
    items = via_task_api(sim, TRIAGE)
    post_id = HTTP.get(f"{sim}/_sim/faults").json()["fired"][0]["post_id"]
    twice = [item for item in items if item["id"] == post_id]
    assert len(twice) == 2 and twice[0] != twice[1]
    assert all(isinstance(TRIAGE.check(item), dict) for item in twice)

    # No summary to list where the analysis has none: its first field's values instead.
    for analysis, shown in ((TRIAGE, "summary"), (SCORES, "stars")):
        reset(sim)
        true = via_task_api(sim, analysis)
        reset(sim, "output:wrong_shape#1")
        wrong = json.loads(task_output(sim, analysis.item_schema()))
        assert wrong == {"analysis": [item[shown] for item in true]}
