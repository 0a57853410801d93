"""A submission's Message Batch whose id was never saved, looked for in the simulator's listing
over loopback HTTP by the real client (`AnthropicBatchClient.find_job`): found by the window,
the size and its results' ids; near misses (another key, no token, another size, outside the
window) are not adopted; one still running, or a listing that cannot be read, is no verdict.
(The rules alone: tests/unit/test_anthropic_batch_match.py; a whole month adopting its orphan:
tests/flow/test_submissions.py.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from postledger.upstreams.anthropic_batch import AnthropicBatchClient
from postledger.upstreams.anthropic_batch_match import line_id
from postledger.upstreams.calls import Found, JobWanted, NoVerdict, NoVerdictReason
from tests.support.simulators import Sim, simulator_process

SECRET = "fake-key-for-the-batch-search"
HEADERS = {"x-api-key": SECRET, "anthropic-version": "2023-06-01"}
KEY = "9f1c" * 8
BY_REQUESTS = "by the requests it carries"
BATCH_IDS = ("2026-10-b0001", "2026-10-b0002", "2026-10-b0003")


def make(url: str, custom_ids: list[str]) -> str:
    return Sim(url).make_message_batch(custom_ids, SECRET)


def ended(url: str, *batch_ids: str) -> None:
    deadline = time.monotonic() + 30
    for batch_id in batch_ids:
        while True:
            seen = httpx.get(f"{url}/v1/messages/batches/{batch_id}", headers=HEADERS).json()
            if seen["processing_status"] == "ended":
                break
            assert time.monotonic() < deadline, batch_id
            time.sleep(0.05)


def ours(key: str = KEY, batch_ids: tuple[str, ...] = BATCH_IDS) -> list[str]:
    return [line_id(batch_id, key) for batch_id in batch_ids]


def wanted(written_at: datetime | None = None) -> JobWanted:
    written = written_at or datetime.now(UTC) - timedelta(minutes=1)
    return JobWanted("2026-10-s1", KEY, BATCH_IDS, written)


def find(url: str, job: JobWanted, *, page_size: int = 100) -> Found | NoVerdict:
    async def search() -> Found | NoVerdict:
        async with AnthropicBatchClient(url, api_key=SecretStr(SECRET)) as client:
            client.page_size = page_size
            return await client.find_job(job)

    return asyncio.run(search())


@pytest.fixture
def sim() -> Iterator[str]:
    with simulator_process(latency=0.05, api_key=SECRET) as url:
        yield url


def test_the_submissions_batch_is_found_by_what_it_carries_among_others(sim: str) -> None:
    foreign = make(sim, list(BATCH_IDS))  # the same batch ids, with no token: not ours
    mine = make(sim, ours())
    newer = [make(sim, ours(batch_ids=BATCH_IDS[:2])), make(sim, ours(key="another key"))]
    ended(sim, foreign, mine, *newer)

    charged = len(Sim(sim).charges())
    assert charged == 11  # each request of the four batches ran, and was paid for
    assert find(sim, wanted()) == Found(mine, BY_REQUESTS)
    # Paging one batch at a time, newest first: found on the third page, and the search
    # stops there (it reads no older page).
    before = Sim(sim).stats()["requests"]["list"]
    assert find(sim, wanted(), page_size=1) == Found(mine, BY_REQUESTS)
    assert Sim(sim).stats()["requests"]["list"] - before == 3
    assert len(Sim(sim).charges()) == charged  # a search pays nothing


@pytest.mark.parametrize(
    "near_miss",
    ["no token", "another key", "one request more", "one request fewer", "outside the window"],
)
def test_a_near_miss_is_not_adopted(sim: str, near_miss: str) -> None:
    custom_ids = {
        "no token": list(BATCH_IDS),
        "another key": ours(key="another key"),
        "one request more": ours(batch_ids=(*BATCH_IDS, "2026-10-b0004")),
        "one request fewer": ours(batch_ids=BATCH_IDS[:2]),
        "outside the window": ours(),
    }[near_miss]
    made = make(sim, custom_ids)
    ended(sim, made)
    # "Outside the window": the submission was written down a day after that batch was made.
    written = datetime.now(UTC) + timedelta(days=1) if near_miss == "outside the window" else None
    assert find(sim, wanted(written)) == Found(None)


def test_a_candidate_still_running_is_no_verdict_until_its_results_say() -> None:
    with simulator_process(latency=60, api_key=SECRET) as url:
        make(url, ours())
        seen = find(url, wanted())
    assert isinstance(seen, NoVerdict) and seen.reason is NoVerdictReason.UNCONFIRMED
    assert "still running" in seen.detail


@pytest.mark.parametrize("fault", ["html", "cut_json"])
def test_a_listing_that_cannot_be_read_is_no_verdict(sim: str, fault: str) -> None:
    ended(sim, make(sim, ours()))
    Sim(sim).set_faults([{"on": "list", "fault": fault, "nth": [1]}])
    seen = find(sim, wanted())
    assert isinstance(seen, NoVerdict) and seen.reason is NoVerdictReason.NOT_THE_ANSWER
    assert find(sim, wanted()) != Found(None)  # read truly the next time: found


@pytest.mark.parametrize("fault", ["html", "cut_file", "missing_lines"])
def test_results_that_cannot_be_read_whole_are_no_verdict(sim: str, fault: str) -> None:
    made = make(sim, ours())
    ended(sim, made)
    Sim(sim).set_faults([{"on": "results", "fault": fault, "nth": [1]}])
    seen: Any = find(sim, wanted())
    assert isinstance(seen, NoVerdict) and seen.reason is NoVerdictReason.RESULTS_INCOMPLETE
    assert find(sim, wanted()) == Found(made, BY_REQUESTS)
