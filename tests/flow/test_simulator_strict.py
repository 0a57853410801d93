"""The simulator refuses what the OpenAI Batch API refuses, as the official `openai` client
meets it: at the upload, at the create (a 400), or in the input file's validation (the batch
ends `failed`, one error per bad line, nothing billed). If postledger's adapter ever wrote
such a request, the tests against the simulator would fail as the real service would."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from simulator.openai_batch_rules import MAX_FILE_BYTES, upload_problem
from tests.support.simulators import Sim, simulator_process

ENDPOINT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with simulator_process(latency=0.05) as url:
        yield url


@pytest.fixture
def client(sim_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{sim_url}/v1", api_key="fake-key-any", max_retries=0)


def line(custom_id: str, **changes: Any) -> dict[str, Any]:
    body = {
        "model": "sim-analyst-1",
        "messages": [{"role": "user", "content": json.dumps({"posts": [{"id": custom_id}]})}],
    }
    request = {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}
    for key, value in changes.items():
        if key.startswith("body_"):
            body[key.removeprefix("body_")] = value
        else:
            request[key] = value
    return request


def upload(client: openai.OpenAI, lines: list[Any], name: str = "in.jsonl") -> str:
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    made = client.files.create(file=(name, io.BytesIO(text.encode())), purpose="batch")
    return made.id


def create(client: openai.OpenAI, file_id: str, **options: Any) -> Any:
    arguments: dict[str, Any] = {
        "input_file_id": file_id,
        "endpoint": ENDPOINT,
        "completion_window": "24h",
        **options,
    }
    return client.batches.create(**arguments)


def test_an_input_file_that_is_not_jsonl_is_refused_at_the_upload(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="Must be .jsonl"):
        upload(client, [line("a")], name="in.txt")
    assert upload_problem("in.jsonl", MAX_FILE_BYTES + 1)  # (200 MB: not uploaded here)
    assert upload_problem("in.jsonl", MAX_FILE_BYTES) is None


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"completion_window": "1h"}, "Supported values are: '24h'"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "at most 16 properties"),
        ({"metadata": {"k" * 65: "v"}}, "at most 64"),
        ({"metadata": {"k": "v" * 513}}, "at most 512"),
    ],
)
def test_a_create_beyond_the_apis_limits_is_refused_at_once_and_bills_nothing(
    client: openai.OpenAI, sim_url: str, options: dict[str, Any], said: str
) -> None:
    before = len(Sim(sim_url).charges())
    with pytest.raises(openai.BadRequestError, match=said):
        create(client, upload(client, [line("a")]), **options)
    assert len(Sim(sim_url).charges()) == before


@pytest.mark.parametrize(
    ("lines", "code", "at"),
    [
        ([line("a"), line("a")], "duplicate_custom_id", 2),
        ([line("a"), line("b", url="/v1/embeddings")], "mismatched_endpoint", 2),
        ([line("a", method="GET")], "mismatched_endpoint", 1),
        ([line("a"), line("b", body_model="other-model")], "mismatched_model", 2),
        ([line("a", body_stream=True)], "invalid_request", 1),
        ([line("a"), "{not json"], "invalid_json_line", 2),
        ([{"custom_id": "a", "method": "POST", "url": ENDPOINT}], "missing_required_parameter", 1),
    ],
)
def test_a_bad_input_file_fails_the_batch_line_by_line_and_bills_nothing(
    client: openai.OpenAI, sim_url: str, lines: list[Any], code: str, at: int
) -> None:
    before = len(Sim(sim_url).charges())
    batch = create(client, upload(client, lines))
    deadline = time.monotonic() + 10
    while batch.status not in ("failed", "completed") and time.monotonic() < deadline:
        time.sleep(0.05)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "failed"
    assert batch.errors is not None and batch.errors.data
    assert [(e.code, e.line) for e in batch.errors.data] == [(code, at)]
    assert len(Sim(sim_url).charges()) == before


def test_more_than_50_000_requests_fail_the_batch(client: openai.OpenAI, sim_url: str) -> None:
    before = len(Sim(sim_url).charges())
    batch = create(client, upload(client, [line(f"p{i}") for i in range(50_001)]))
    assert batch.status == "failed" and batch.errors is not None
    (error,) = batch.errors.data
    assert error.code == "too_many_requests"
    assert len(Sim(sim_url).charges()) == before
