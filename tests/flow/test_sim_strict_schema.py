"""The simulator refuses a strict `json_schema` that OpenAI's structured outputs refuse, as
OpenAI does, over loopback HTTP: a chat completion answered 400 naming `response_format`,
nothing charged; a Batch API line answered the same 400 in the error file, the other lines
run and only they billed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.simulators import simulator_process

LATENCY = 0.01
HTTP = httpx.Client(timeout=10)
POSTS = [{"id": "p1", "text": "Where is my parcel?"}]
PREFIX = "Invalid schema for response_format 'post_analyses': "


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with simulator_process(latency=LATENCY) as url:
        yield url


@pytest.fixture
def url(sim: str) -> str:
    HTTP.post(f"{sim}/_sim/reset", json={"latency": LATENCY}).raise_for_status()
    return sim


def item(**properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"id": {"type": "string"}, **properties},
        "required": ["id", *properties],
        "additionalProperties": False,
    }


AREA = {"type": "string", "enum": ["billing", "shipping"], "description": "Area."}


def body(items: dict[str, Any], *, strict: bool = True, posts: Any = POSTS) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {"results": {"type": "array", "items": items}},
        "required": ["results"],
        "additionalProperties": False,
    }
    spec = {"name": "post_analyses", "strict": strict, "schema": schema}
    return {
        "model": "sim-analyst-1",
        "messages": [{"role": "user", "content": json.dumps({"posts": posts})}],
        "response_format": {"type": "json_schema", "json_schema": spec},
    }


def unrequired() -> dict[str, Any]:
    schema = item(area=AREA, reply={"type": "boolean", "description": "Reply?"})
    schema["required"] = ["id", "area"]
    return schema


def open_ended() -> dict[str, Any]:
    schema = item(area=AREA)
    del schema["additionalProperties"]
    return schema


MANY_VALUES = item(
    area={"type": "string", "enum": [f"v{n}" for n in range(1001)], "description": "A."}
)
MANY_FIELDS = item(**{f"f{n}": {"type": "boolean", "description": "F."} for n in range(5000)})
REFUSED = {
    "a property not required": (
        unrequired(),
        "In context=('properties', 'results', 'items'), 'required' is required to be supplied "
        "and to be an array including every key in properties. Missing 'reply'.",
    ),
    "no additionalProperties": (
        open_ended(),
        "In context=('properties', 'results', 'items'), 'additionalProperties' is required to "
        "be supplied and to be false.",
    ),
    "1001 enum values": (
        MANY_VALUES,
        "Expected at most 1000 enum values in total within a schema, but received 1001.",
    ),
    "5002 properties": (
        MANY_FIELDS,
        "Expected at most 5000 properties in total within a schema, but received 5002.",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_chat_completion_with_a_schema_strict_mode_refuses_is_a_400_and_free(
    url: str, case: str
) -> None:
    schema, said = REFUSED[case]
    answer = HTTP.post(f"{url}/v1/chat/completions", json=body(schema))
    assert answer.status_code == 400
    assert answer.json() == {
        "error": {
            "message": PREFIX + said,
            "type": "invalid_request_error",
            "param": "response_format",
            "code": None,
        }
    }
    assert HTTP.get(f"{url}/_sim/charges").json()["charges"] == []


def test_without_strict_the_same_schema_is_answered(url: str) -> None:
    answer = HTTP.post(f"{url}/v1/chat/completions", json=body(unrequired(), strict=False))
    assert answer.status_code == 200
    assert len(HTTP.get(f"{url}/_sim/charges").json()["charges"]) == 1


def run_batch(url: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    lines = [
        {"custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions", "body": b}
        for n, b in enumerate(bodies, start=1)
    ]
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    upload = HTTP.post(
        f"{url}/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"}
    )
    asked = {"input_file_id": upload.json()["id"], "endpoint": "/v1/chat/completions"}
    made = HTTP.post(f"{url}/v1/batches", json={**asked, "completion_window": "24h"}).json()
    for _ in range(200):
        batch: dict[str, Any] = HTTP.get(f"{url}/v1/batches/{made['id']}").json()
        if batch["status"] not in ("validating", "in_progress"):
            return batch
        time.sleep(0.05)
    raise AssertionError(f"the batch never ended: {made}")


def lines_of(url: str, file_id: str | None) -> dict[str, dict[str, Any]]:
    if file_id is None:
        return {}
    content = HTTP.get(f"{url}/v1/files/{file_id}/content").content
    return {line["custom_id"]: line for line in map(json.loads, content.splitlines())}


def test_a_batch_line_with_a_refused_schema_is_a_400_in_the_error_file_the_rest_runs(
    url: str,
) -> None:
    other = [{"id": "p2", "text": "I love it."}]
    batch = run_batch(url, [body(item(area=AREA), posts=other), body(unrequired())])
    assert batch["status"] == "completed"
    assert batch["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
    assert list(lines_of(url, batch["output_file_id"])) == ["r1"]
    refused = lines_of(url, batch["error_file_id"])["r2"]
    assert refused["error"] is None and refused["response"]["status_code"] == 400
    error = refused["response"]["body"]["error"]
    assert error["param"] == "response_format" and error["code"] is None
    assert error["message"] == PREFIX + REFUSED["a property not required"][1]
    charges = HTTP.get(f"{url}/_sim/charges").json()["charges"]
    assert [charge["post_ids"] for charge in charges] == [["p2"]]  # the refused line: free


def test_a_batch_of_refused_lines_only_runs_nothing_and_bills_nothing(url: str) -> None:
    batch = run_batch(url, [body(unrequired()), body(open_ended())])
    assert batch["status"] == "completed" and "output_file_id" not in batch
    assert sorted(lines_of(url, batch["error_file_id"])) == ["r1", "r2"]
    assert HTTP.get(f"{url}/_sim/charges").json()["charges"] == []
