"""The simulator keeps what its Batch API faces hold on disk, not in memory
(`simulator.spool`): an upload comes back byte for byte from its file, a reset removes every
file, a stopped simulator leaves no folder behind, a create body cut into small chunks makes
the same Message Batch, and a batch's answers are still its whole output split by post id."""

from __future__ import annotations

import asyncio
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from simulator.app import create_app
from simulator.child import simulator_process
from simulator.model import count_tokens
from simulator.spool import TemporarySpool
from simulator.upstream import Upstream

ENDPOINT = "/v1/chat/completions"
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}


@pytest.fixture
def app_client() -> Iterator[tuple[TestClient, TemporarySpool]]:
    app = create_app(Upstream(latency=0.0))
    spool: TemporarySpool = app.state.spool
    with TestClient(app) as client:
        yield client, spool
    spool.close()


def files_in(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


def upload(client: httpx.Client | TestClient, content: bytes) -> dict[str, Any]:
    file = io.BytesIO(content)  # a file object: sent as it is read
    answer = client.post("/v1/files", files={"file": ("in.jsonl", file)}, data={"purpose": "batch"})
    assert answer.status_code == 200, answer.text
    made: dict[str, Any] = answer.json()
    return made


def test_an_upload_is_kept_on_disk_and_read_back_byte_for_byte(
    app_client: tuple[TestClient, TemporarySpool],
) -> None:
    client, spool = app_client
    content = "".join(f'{{"line": {n}, "text": "é {"x" * n}"}}\n' for n in range(3000)).encode()
    made = upload(client, content)
    assert made["bytes"] == len(content)
    (kept,) = files_in(spool.root)
    assert kept.name == f"{made['id']}.jsonl" and kept.read_bytes() == content
    assert client.get(f"/v1/files/{made['id']}/content").content == content
    refused = client.post(
        "/v1/files", files={"file": ("in.txt", io.BytesIO(content))}, data={"purpose": "batch"}
    )
    assert refused.status_code == 400 and "Must be .jsonl" in refused.text
    assert files_in(spool.root) == [kept]  # the refused upload's file is gone

    assert client.post("/_sim/reset", json={}).status_code == 200
    assert files_in(spool.root) == []
    assert client.get(f"/v1/files/{made['id']}").status_code == 404


def test_a_stopped_simulator_leaves_no_folder_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the child makes its folder
    with simulator_process(latency=0.01) as url, httpx.Client(base_url=url) as client:
        made = upload(client, b'{"a": 1}\n')
        (folder,) = tmp_path.iterdir()
        assert [path.name for path in files_in(folder)] == [f"{made['id']}.jsonl"]
    assert list(tmp_path.iterdir()) == []  # stopped by SIGTERM, it removed its folder


def plain_line(custom_id: str, text: str) -> dict[str, Any]:
    """A chat request whose user message is no postledger posts: one post, id "1"."""
    body = {"model": "sim-analyst-1", "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}


def test_a_post_id_carried_by_every_line_is_answered_across_the_batch(
    app_client: tuple[TestClient, TemporarySpool],
) -> None:
    """As when the whole output was split by post id: every line carries post "1", so each
    line's answer holds every line's item, and its prompt counts the last line's text."""
    client, _ = app_client
    texts = ["I love it, thanks!", "Why is it broken?", "Please add dark mode to the app."]
    lines = [plain_line(f"r{n}", text) for n, text in enumerate(texts)]
    made = upload(client, "".join(json.dumps(line) + "\n" for line in lines).encode())
    asked = {"input_file_id": made["id"], "endpoint": ENDPOINT, "completion_window": "24h"}
    batch = client.post("/v1/batches", json=asked).json()
    ended = client.get(f"/v1/batches/{batch['id']}").json()
    assert ended["status"] == "completed", ended
    output = client.get(f"/v1/files/{ended['output_file_id']}/content").content
    answers = [json.loads(line) for line in output.splitlines()]
    assert [answer["custom_id"] for answer in answers] == ["r0", "r1", "r2"]
    for answer in answers:
        body = answer["response"]["body"]
        items = json.loads(body["choices"][0]["message"]["content"])
        assert [item["id"] for item in items] == ["1", "1", "1"]
        assert body["usage"]["prompt_tokens"] == count_tokens("") + count_tokens(texts[-1])


def test_a_create_body_in_small_chunks_makes_the_same_message_batch(
    app_client: tuple[TestClient, TemporarySpool],
) -> None:
    client, spool = app_client
    user = json.dumps({"posts": [{"id": "p1", "text": "Hi"}]})
    params = {
        "model": "sim-analyst-1",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": user}],
    }
    requests = [{"custom_id": f"r{n}", "params": params} for n in range(5)]
    raw = json.dumps({"requests": requests}).encode()

    def chunks() -> Iterator[bytes]:
        yield from (raw[at : at + 7] for at in range(0, len(raw), 7))

    made = client.post(
        "/v1/messages/batches",
        content=chunks(),
        headers={**ANTHROPIC_HEADERS, "content-type": "application/json"},
    )
    assert made.status_code == 200, made.text
    batch_id = made.json()["id"]
    assert (
        client.get(f"/v1/messages/batches/{batch_id}", headers=ANTHROPIC_HEADERS).json()[
            "request_counts"
        ]["succeeded"]
        == 5
    )
    results = client.get(f"/v1/messages/batches/{batch_id}/results", headers=ANTHROPIC_HEADERS)
    lines = [json.loads(line) for line in results.content.splitlines()]
    assert [line["custom_id"] for line in lines] == [f"r{n}" for n in range(5)]
    assert {line["result"]["type"] for line in lines} == {"succeeded"}
    assert [path.name.split("-")[0] for path in files_in(spool.root)] == ["results"]
    assert os.path.getsize(files_in(spool.root)[0]) == len(results.content)


def test_a_message_batch_create_answers_before_its_requests_run() -> None:
    """A month's create is 100 000 requests: running them all before answering kept the
    client past its read timeout, and every other route waiting. The create answers once the
    body is checked (`in_progress`, every request `processing`); its requests are then run a
    slice at a time, while a poll still answers, and each is charged once."""
    app = create_app(Upstream(latency=0.0))
    spool: TemporarySpool = app.state.spool
    user = json.dumps({"posts": [{"id": "p1", "text": "Hi"}]})
    params = {
        "model": "sim-analyst-1",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": user}],
    }
    count = 2000
    body = {"requests": [{"custom_id": f"r{n}", "params": params} for n in range(count)]}

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            made = await client.post("/v1/messages/batches", json=body, headers=ANTHROPIC_HEADERS)
            assert made.status_code == 200, made.text
            assert made.json()["processing_status"] == "in_progress"
            assert made.json()["request_counts"]["processing"] == count
            charges = (await client.get("/_sim/charges")).json()["charges"]
            assert len(charges) < count  # answered before its requests all ran
            batch_url = f"/v1/messages/batches/{made.json()['id']}"
            polls = []
            while (seen := (await client.get(batch_url, headers=ANTHROPIC_HEADERS)).json())[
                "processing_status"
            ] != "ended":
                polls.append(seen["request_counts"]["processing"])
                await asyncio.sleep(0.01)  # in-process: the requests run only in our pauses
            assert polls and set(polls) == {count}
            assert seen["request_counts"]["succeeded"] == count
            results = await client.get(f"{batch_url}/results", headers=ANTHROPIC_HEADERS)
            lines = [json.loads(line) for line in results.content.splitlines()]
            assert [line["custom_id"] for line in lines] == [f"r{n}" for n in range(count)]
            charges = (await client.get("/_sim/charges")).json()["charges"]
            assert len(charges) == count

    try:
        asyncio.run(scenario())
    finally:
        spool.close()
