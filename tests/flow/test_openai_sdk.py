"""The official `openai` client, pointed at the simulator, creates and reads chat completions
and batches: evidence that the simulator speaks the real protocol, so the adapters tested
against it speak it too."""

from __future__ import annotations

import io
import json
import time

import openai
import pytest

from simulator.model import analyse
from tests.support.simulators import simulator_process

POSTS = [{"id": "a", "text": "I love it, thanks!"}, {"id": "b", "text": "Why is it broken?"}]
SECRET = "fake-key-for-the-openai-simulator"


def test_chat_completions_through_the_official_client() -> None:
    with simulator_process(latency=0.05, api_key=SECRET) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
        answer = client.chat.completions.create(
            model="sim-analyst-1",
            messages=[
                {"role": "system", "content": "Analyse each post. Answer in JSON."},
                {"role": "user", "content": json.dumps({"posts": POSTS})},
            ],
            response_format={"type": "json_object"},
        )
        content = answer.choices[0].message.content
        assert content is not None
        assert json.loads(content) == {"results": [analyse(p["id"], p["text"]) for p in POSTS]}
        assert answer.usage is not None and answer.usage.prompt_tokens > 0

        wrong = openai.OpenAI(base_url=f"{url}/v1", api_key="fake-key-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as refused:
            wrong.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hello"}]
            )
        assert refused.value.code == "invalid_api_key"


def test_batches_through_the_official_client() -> None:
    with simulator_process(latency=0.1) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="fake-key-any", max_retries=0)
        lines = "".join(
            json.dumps(
                {
                    "custom_id": post["id"],
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {
                        "model": "sim-analyst-1",
                        "messages": [
                            {"role": "system", "content": "Analyse. JSON."},
                            {"role": "user", "content": json.dumps({"posts": [post]})},
                        ],
                        "response_format": {"type": "json_object"},
                    },
                }
            )
            + "\n"
            for post in POSTS
        )
        uploaded = client.files.create(
            file=("in.jsonl", io.BytesIO(lines.encode())), purpose="batch"
        )
        made = client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"postledger_batch": "2026-10-b0001"},
        )
        assert made.status in ("validating", "in_progress")
        listed = client.batches.list(limit=10)
        assert [b.id for b in listed.data] == [made.id]
        assert listed.data[0].metadata == {"postledger_batch": "2026-10-b0001"}

        deadline = time.monotonic() + 10
        batch = client.batches.retrieve(made.id)
        while batch.status != "completed" and time.monotonic() < deadline:
            time.sleep(0.05)
            batch = client.batches.retrieve(made.id)
        assert batch.status == "completed" and batch.output_file_id
        assert batch.request_counts is not None and batch.request_counts.completed == 2
        output = client.files.content(batch.output_file_id).text
        by_post = {
            line["custom_id"]: json.loads(
                line["response"]["body"]["choices"][0]["message"]["content"]
            )
            for line in map(json.loads, output.splitlines())
        }
        assert by_post == {p["id"]: {"results": [analyse(p["id"], p["text"])]} for p in POSTS}

        second = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        cancelled = client.batches.cancel(second.id)
        assert cancelled.status in ("cancelling", "cancelled")
        time.sleep(0.1)
        assert client.batches.retrieve(second.id).status == "cancelled"
        # Paging: newest first, `after` the last id seen.
        first_page = client.batches.list(limit=1)
        assert [b.id for b in first_page.data] == [second.id] and first_page.has_more
        assert [b.id for b in client.batches.list(limit=1, after=second.id).data] == [made.id]
        with pytest.raises(openai.NotFoundError):
            client.batches.retrieve("batch_nope")
