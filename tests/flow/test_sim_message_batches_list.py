"""The simulator lists its Message Batches as Anthropic does (GET /v1/messages/batches), over
loopback HTTP: the official `anthropic` client's auto-pagination walks every batch newest
first, either way; `before_id` / `after_id` pages read raw; each listed batch is the JSON its
retrieve gives; what Anthropic refuses is refused in its words; the `list` faults fire here
too. (The route: `simulator.anthropic_batch_list`.)"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from anthropic.types.messages.batch_create_params import Request

from tests.support.simulators import Sim, simulator_process

SECRET = "fake-key-for-the-anthropic-simulator"
HEADERS = {"x-api-key": SECRET, "anthropic-version": "2023-06-01"}
LATENCY = 0.05
# RFC 3339 UTC, with microseconds, as Anthropic writes its times.
RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
# One client for the module's loopback calls: each new client builds a TLS context it never uses.
HTTP = httpx.Client(timeout=10)


def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0)


def one_request(number: int) -> list[Request]:
    """A batch's one request: a Messages API call on one post."""
    post = {"posts": [{"id": f"p{number}", "text": f"Post number {number}, thanks!"}]}
    params: MessageCreateParamsNonStreaming = {
        "model": "sim-analyst-1",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": json.dumps(post)}],
    }
    return [{"custom_id": f"r{number}", "params": params}]


def make_batches(url: str, count: int = 5) -> list[str]:
    """`count` Message Batches of one request each, made back to back; their ids, oldest first."""
    batches = client(url).messages.batches
    return [batches.create(requests=one_request(number)).id for number in range(count)]


def listing(url: str, **params: str | int) -> dict[str, Any]:
    answer = HTTP.get(f"{url}/v1/messages/batches", params=params, headers=HEADERS)
    assert answer.status_code == 200, answer.text
    page: dict[str, Any] = answer.json()
    return page


def ids_of(page: dict[str, Any]) -> list[str]:
    return [batch["id"] for batch in page["data"]]


def all_ended(url: str, ids: list[str]) -> None:
    deadline = time.monotonic() + 30
    for batch_id in ids:
        while retrieve(url, batch_id)["processing_status"] != "ended":
            assert time.monotonic() < deadline, batch_id
            time.sleep(LATENCY)


def retrieve(url: str, batch_id: str) -> dict[str, Any]:
    answer = HTTP.get(f"{url}/v1/messages/batches/{batch_id}", headers=HEADERS)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


@pytest.fixture
def sim() -> Iterator[str]:
    with simulator_process(latency=LATENCY, api_key=SECRET) as url:
        yield url


def test_the_official_client_pages_through_every_batch_newest_first(sim: str) -> None:
    made = make_batches(sim)
    newest_first = made[::-1]
    walked = list(client(sim).messages.batches.list(limit=2))  # pages of 2, 2 and 1
    assert [batch.id for batch in walked] == newest_first
    assert Sim(sim).stats()["requests"]["list"] == 3  # the last page said has_more: false
    stamps = [batch["created_at"] for batch in listing(sim)["data"]]
    assert all(RFC3339_UTC.fullmatch(stamp) for stamp in stamps), stamps
    assert stamps == sorted(stamps, reverse=True) and len(set(stamps)) == len(stamps)
    # Paging with before_id, it walks towards the newer ones: the nearest page first.
    newer = client(sim).messages.batches.list(limit=2, before_id=made[0])
    assert [batch.id for batch in newer] == [made[2], made[1], made[4], made[3]]
    assert list(client(sim).messages.batches.list(after_id=made[0])) == []


def test_before_id_and_after_id_give_the_pages_next_to_a_batch(sim: str) -> None:
    b0, b1, b2, b3, b4 = make_batches(sim)
    whole = listing(sim)  # limit 20: all of them
    assert ids_of(whole) == [b4, b3, b2, b1, b0]
    assert (whole["has_more"], whole["first_id"], whole["last_id"]) == (False, b4, b0)
    first = listing(sim, limit=2)
    assert ids_of(first) == [b4, b3]
    assert (first["has_more"], first["first_id"], first["last_id"]) == (True, b4, b3)
    older = listing(sim, limit=2, after_id=b3)
    assert ids_of(older) == [b2, b1] and older["has_more"] is True
    assert (older["first_id"], older["last_id"]) == (b2, b1)
    last = listing(sim, limit=2, after_id=b1)
    assert ids_of(last) == [b0] and last["has_more"] is False
    newer = listing(sim, limit=2, before_id=b1)
    assert ids_of(newer) == [b3, b2] and newer["has_more"] is True
    assert (newer["first_id"], newer["last_id"]) == (b3, b2)
    newest = listing(sim, limit=2, before_id=b3)
    assert ids_of(newest) == [b4] and newest["has_more"] is False
    for edge in (listing(sim, after_id=b0), listing(sim, before_id=b4)):
        assert edge == {"data": [], "has_more": False, "first_id": None, "last_id": None}
    assert ids_of(listing(sim, limit=1000)) == ids_of(listing(sim, limit=5)) == ids_of(whole)


def test_each_listed_batch_is_what_its_retrieve_gives(sim: str) -> None:
    Sim(sim).hold(True)  # in progress until released
    made = make_batches(sim, 3)
    in_progress = listing(sim)["data"]
    assert [batch["processing_status"] for batch in in_progress] == ["in_progress"] * 3
    assert in_progress == [retrieve(sim, batch_id) for batch_id in made[::-1]]
    client(sim).messages.batches.cancel(made[1])
    Sim(sim).hold(False)
    all_ended(sim, made)
    ended = listing(sim)["data"]
    assert ended == [retrieve(sim, batch_id) for batch_id in made[::-1]]
    assert [batch["request_counts"]["succeeded"] for batch in ended] == [1, 0, 1]
    assert ended[1]["request_counts"]["canceled"] == 1 and ended[1]["cancel_initiated_at"]
    for batch in ended:
        assert batch["type"] == "message_batch" and batch["results_url"].endswith(
            f"/v1/messages/batches/{batch['id']}/results"
        )
        times = [batch[name] for name in ("created_at", "ended_at", "expires_at")]
        assert all(RFC3339_UTC.fullmatch(at) for at in times), times
        assert batch["created_at"] <= batch["ended_at"] < batch["expires_at"]
    # SDK-typed too: the listing's objects are the retrieve's.
    sdk = client(sim).messages.batches
    assert list(sdk.list()) == [sdk.retrieve(batch_id) for batch_id in made[::-1]]


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"before_id": "B", "after_id": "A"}, "before_id and after_id"),
        ({"after_id": "msgbatch_nothing"}, "after_id"),
        ({"before_id": "msgbatch_nothing"}, "before_id"),
    ],
)
def test_invalid_parameters_are_refused_as_anthropic_refuses_them(
    sim: str, params: dict[str, str | int], says: str
) -> None:
    made = make_batches(sim, 2)
    params = {key: made[0] if value in ("A", "B") else value for key, value in params.items()}
    answer = HTTP.get(f"{sim}/v1/messages/batches", params=params, headers=HEADERS)
    assert answer.status_code == 400 and answer.headers.get("request-id")
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert says in body["error"]["message"]


def test_the_key_and_the_version_are_checked_as_on_the_other_batch_routes(sim: str) -> None:
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        client(sim).messages.batches.list(limit=0)
    wrong = anthropic.Anthropic(base_url=sim, api_key="fake-key-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.batches.list()
    unversioned = HTTP.get(f"{sim}/v1/messages/batches", headers={"x-api-key": SECRET})
    assert unversioned.status_code == 400 and "anthropic-version" in unversioned.text


def test_the_list_faults_fire_on_the_listing_then_it_lists_truly(sim: str) -> None:
    made = make_batches(sim, 3)
    Sim(sim).set_faults([{"on": "list", "fault": "html", "nth": [1]}])
    portal = HTTP.get(f"{sim}/v1/messages/batches", headers=HEADERS)
    assert portal.status_code == 200 and portal.headers["content-type"].startswith("text/html")
    assert "<html>" in portal.text
    assert ids_of(listing(sim)) == made[::-1]  # the next read: the true answer
    assert Sim(sim).fired() == [{"on": "list", "fault": "html", "n": 1}]
    # `per_id`: the first read of each cursor is cut; the cursor is what it hit.
    Sim(sim).set_faults([{"on": "list", "fault": "cut_json", "nth": [1], "per_id": True}])
    cut = HTTP.get(f"{sim}/v1/messages/batches?after_id={made[2]}&limit=1", headers=HEADERS)
    assert cut.status_code == 200 and cut.text.startswith('{"data": [{"id": ')
    with pytest.raises(ValueError):
        cut.json()
    assert ids_of(listing(sim, after_id=made[2], limit=1)) == [made[1]]
    assert Sim(sim).fired() == [
        {"on": "list", "fault": "cut_json", "n": 1, "n_of_id": 1, "id": made[2]}
    ]
    Sim(sim).set_faults([{"on": "list", "fault": "http_503", "nth": [1]}])
    with pytest.raises(anthropic.OverloadedError):  # Anthropic's 529
        client(sim).messages.batches.list()
    assert [batch.id for batch in client(sim).messages.batches.list()] == made[::-1]
