"""The simulator's prompt cache and bill, over HTTP, on each of its five faces
(`simulator.caching`, `simulator.billing`): a first request with a long (1024 tokens or more)
prefix is not read from the cache (Anthropic's, marked, is written to it), the next ones read
it, in exactly the tokens the provider would; a short prefix never is, nor an Anthropic
request that marks none; and every charge costs what its usage costs at the simulator's
price, worked out here apart, with the Batch API faces at half price and an OpenAI batch job
billed line by line."""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass
from fractions import Fraction
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from simulator.app import create_app
from simulator.model import count_tokens
from simulator.upstream import Upstream
from tests.support.simulators import Sim, simulator_process

MODEL = "sim-analyst-1"
ENDPOINT = "/v1/chat/completions"
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}
LONG = "You analyse customer posts. " * 200  # 5600 characters: 1400 tokens
SHORT = "Analyse the posts."
LONG_TOKENS = 1400
OPENAI_READ = 1280  # 1024, then the whole 128-token steps of the other 376
TEXTS = ["I love it, thanks!", "Why is it broken? It crashes every time I open it."]


@dataclass(frozen=True)
class Used:
    """One request's usage, by class: `input` neither read from the cache nor written."""

    input: int
    cached: int
    written: int
    output: int


def cost(used: Used, discount: int) -> int:
    """One request's cost at the simulator's price, in exact fractions, rounded up."""
    listed = Fraction(
        used.input * 150_000
        + used.cached * 15_000
        + used.written * 187_500
        + used.output * 600_000,
        1_000_000,
    )
    return math.ceil(listed * Fraction(100 - discount, 100))


def posts_of(n: int) -> list[dict[str, str]]:
    """Request n's posts: the same texts under ids of its own."""
    return [{"id": f"r{n}p{i}", "text": text} for i, text in enumerate(TEXTS)]


def total_input(prompt: str) -> int:
    """A request's whole input, by the simulator's count: its prompt and each post's text."""
    return count_tokens(prompt) + sum(count_tokens(text) for text in TEXTS)


def user_message(n: int) -> dict[str, str]:
    return {"role": "user", "content": json.dumps({"posts": posts_of(n)})}


def openai_used(usage: dict[str, Any]) -> Used:
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    return Used(usage["prompt_tokens"] - cached, cached, 0, usage["completion_tokens"])


def anthropic_used(usage: dict[str, Any]) -> Used:
    classes = ("input", "cache_read_input", "cache_creation_input", "output")
    return Used(*(usage[f"{name}_tokens"] for name in classes))


def marked(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


# --- each face: `count` requests with this system prompt, asked in order ------------------------


Asked = Callable[[TestClient, Any, int], list[Used]]


def one_by_one(ask: Callable[[TestClient, Any, int], Used]) -> Asked:
    """A synchronous face's `count` requests: request n asked once request n - 1 answered."""
    return lambda client, system, count: [ask(client, system, n) for n in range(count)]


@one_by_one
def ask_tasks(client: TestClient, system: Any, n: int) -> Used:
    made = client.post("/v1/tasks", json={"model": MODEL, "prompt": system, "posts": posts_of(n)})
    assert made.status_code == 202, made.text
    done = client.get(f"/v1/tasks/{made.json()['task_id']}").json()
    assert done["status"] == "succeeded", done
    usage = done["usage"]
    assert set(usage) == {"input_tokens", "cached_input_tokens", "output_tokens"}
    return Used(usage["input_tokens"], usage["cached_input_tokens"], 0, usage["output_tokens"])


def chat_body(system: Any, n: int) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, user_message(n)]
    return {"model": MODEL, "messages": messages, "response_format": {"type": "json_object"}}


@one_by_one
def ask_chat(client: TestClient, system: Any, n: int) -> Used:
    answer = client.post(ENDPOINT, json=chat_body(system, n))
    assert answer.status_code == 200, answer.text
    return openai_used(answer.json()["usage"])


def openai_batch(client: TestClient, system: Any, count: int) -> str:
    """An OpenAI batch of `count` chat requests (its input file uploaded); its id."""
    lines = [
        {"custom_id": f"r{n}", "method": "POST", "url": ENDPOINT, "body": chat_body(system, n)}
        for n in range(count)
    ]
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    file = ("in.jsonl", io.BytesIO(content))
    uploaded = client.post("/v1/files", files={"file": file}, data={"purpose": "batch"}).json()
    asked = {"input_file_id": uploaded["id"], "endpoint": ENDPOINT, "completion_window": "24h"}
    batch_id: str = client.post("/v1/batches", json=asked).json()["id"]
    return batch_id


def ask_openai_batch(client: TestClient, system: Any, count: int) -> list[Used]:
    ended = client.get(f"/v1/batches/{openai_batch(client, system, count)}").json()
    assert ended["status"] == "completed", ended
    output = client.get(f"/v1/files/{ended['output_file_id']}/content").content
    answers = [json.loads(line) for line in output.splitlines()]
    assert [answer["custom_id"] for answer in answers] == [f"r{n}" for n in range(count)]
    return [openai_used(answer["response"]["body"]["usage"]) for answer in answers]


def messages_params(system: Any, n: int) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 1024, "system": system, "messages": [user_message(n)]}


@one_by_one
def ask_messages(client: TestClient, system: Any, n: int) -> Used:
    sent = messages_params(system, n)
    answer = client.post("/v1/messages", json=sent, headers=ANTHROPIC_HEADERS)
    assert answer.status_code == 200, answer.text
    return anthropic_used(answer.json()["usage"])


def message_batch(client: TestClient, system: Any, count: int) -> str:
    requests = [{"custom_id": f"r{n}", "params": messages_params(system, n)} for n in range(count)]
    made = client.post(
        "/v1/messages/batches", json={"requests": requests}, headers=ANTHROPIC_HEADERS
    )
    assert made.status_code == 200, made.text
    batch_id: str = made.json()["id"]
    return batch_id


def ended_message_batch(client: TestClient, batch_id: str) -> list[dict[str, Any]]:
    """Its results lines, once it ended (its requests run in the app's own time)."""
    deadline = time.monotonic() + 10
    url = f"/v1/messages/batches/{batch_id}"
    while client.get(url, headers=ANTHROPIC_HEADERS).json()["processing_status"] != "ended":
        assert time.monotonic() < deadline, "the Message Batch did not end"
        time.sleep(0.01)
    results = client.get(f"{url}/results", headers=ANTHROPIC_HEADERS)
    return [json.loads(line) for line in results.content.splitlines()]


def ask_message_batch(client: TestClient, system: Any, count: int) -> list[Used]:
    lines = ended_message_batch(client, message_batch(client, system, count))
    assert [line["custom_id"] for line in lines] == [f"r{n}" for n in range(count)]
    return [anthropic_used(line["result"]["message"]["usage"]) for line in lines]


@dataclass(frozen=True)
class Face:
    ask: Asked
    anthropic: bool  # caches only what it marks, and writes it; else OpenAI's automatic cache
    discount: int  # percent: the Batch API faces' half price
    one_charge: bool = False  # an OpenAI batch job: one charge for all its lines

    def system(self, text: str) -> Any:
        """A system prompt of `text`, asked to be cached where the face needs asking."""
        return marked(text) if self.anthropic else text


FACES = {
    "task_api": Face(ask_tasks, anthropic=False, discount=0),
    "openai_chat": Face(ask_chat, anthropic=False, discount=0),
    "openai_batch": Face(ask_openai_batch, anthropic=False, discount=50, one_charge=True),
    "anthropic_messages": Face(ask_messages, anthropic=True, discount=0),
    "anthropic_batch": Face(ask_message_batch, anthropic=True, discount=50),
}
ANTHROPIC_FACES = [name for name, face in FACES.items() if face.anthropic]


@pytest.fixture
def client() -> Iterator[TestClient]:
    app = create_app(Upstream(latency=0.0))
    with TestClient(app) as client:
        yield client
    app.state.spool.close()


def charged(client: TestClient) -> list[tuple[Used, int]]:
    """Each charge's usage and cost, checked against the bill's total."""
    classes = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens")
    charges = client.get("/_sim/charges").json()["charges"]
    found = [(Used(*(c[name] for name in classes)), c["cost"]) for c in charges]
    bill = client.get("/_sim/bill").json()
    assert bill == {"cost": sum(paid for _, paid in found), "charges": len(found)}
    return found


def billed_as(face: Face, used: list[Used]) -> list[tuple[Used, int]]:
    """The charges these requests make: one each, at its own cost; an OpenAI batch job, one
    for all its lines, whose cost is each line's, rounded up on its own, summed."""
    if face.one_charge:
        total = Used(*(sum(column) for column in zip(*map(astuple, used), strict=True)))
        return [(total, sum(cost(line, face.discount) for line in used))]
    return [(one, cost(one, face.discount)) for one in used]


# --- the cache, on every face ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", FACES)
def test_a_long_prefix_is_read_from_the_cache_from_the_second_request_on(
    client: TestClient, kind: str
) -> None:
    face = FACES[kind]
    used = face.ask(client, face.system(LONG), 3)
    whole = total_input(LONG)
    outputs = [one.output for one in used]
    assert all(output > 0 for output in outputs)
    if face.anthropic:  # written whole by the first, read whole by the next
        first = Used(whole - LONG_TOKENS, 0, LONG_TOKENS, outputs[0])
        then = [Used(whole - LONG_TOKENS, LONG_TOKENS, 0, output) for output in outputs[1:]]
    else:  # recorded free by the first, read in 128-token steps by the next
        first = Used(whole, 0, 0, outputs[0])
        then = [Used(whole - OPENAI_READ, OPENAI_READ, 0, output) for output in outputs[1:]]
    assert used == [first, *then]
    assert charged(client) == billed_as(face, used)


@pytest.mark.parametrize("kind", FACES)
def test_a_prefix_under_1024_tokens_is_never_cached(client: TestClient, kind: str) -> None:
    face = FACES[kind]
    just_short = "x" * (4 * 1023)  # 1023 tokens
    for prompt in (SHORT, just_short):
        used = face.ask(client, face.system(prompt), 2)
        assert [(one.input, one.cached, one.written) for one in used] == [
            (total_input(prompt), 0, 0)
        ] * 2
    used_all = [used for used, _ in charged(client)]
    assert all(one.cached == one.written == 0 for one in used_all)


@pytest.mark.parametrize("kind", ANTHROPIC_FACES)
@pytest.mark.parametrize(
    "system",
    [
        LONG,
        [{"type": "text", "text": LONG}],
        [{"type": "text", "text": LONG, "cache_control": None}],
    ],
    ids=["string", "blocks", "null-control"],
)
def test_an_anthropic_request_that_marks_nothing_is_never_cached(
    client: TestClient, kind: str, system: Any
) -> None:
    face = FACES[kind]
    used = face.ask(client, system, 2)
    assert [(one.input, one.cached, one.written) for one in used] == [(total_input(LONG), 0, 0)] * 2
    assert charged(client) == billed_as(face, used)


@pytest.mark.parametrize("kind", ANTHROPIC_FACES)
def test_the_anthropic_prefix_runs_to_the_last_marked_block(client: TestClient, kind: str) -> None:
    face = FACES[kind]
    tail, end = " Keep each summary short.", " Answer with the tool."
    system = [
        {"type": "text", "text": LONG},
        {"type": "text", "text": tail, "cache_control": {"type": "ephemeral", "ttl": "5m"}},
        {"type": "text", "text": end},
    ]
    prefix, whole = count_tokens(LONG + tail), total_input(LONG + tail + end)
    used = face.ask(client, system, 2)
    assert [(one.input, one.cached, one.written) for one in used] == [
        (whole - prefix, 0, prefix),
        (whole - prefix, prefix, 0),
    ]
    assert charged(client) == billed_as(face, used)


def test_the_faces_share_one_cache_by_model_and_prompt(client: TestClient) -> None:
    """One cache per simulator: a task's prompt is the same prefix as a completion's system
    prompt; another model's is another entry."""
    (first,) = ask_tasks(client, LONG, 1)
    (then,) = ask_chat(client, LONG, 1)
    assert (first.cached, then.cached) == (0, OPENAI_READ)
    other = chat_body(LONG, 0) | {"model": "sim-analyst-2"}
    answer = client.post(ENDPOINT, json=other).json()
    assert openai_used(answer["usage"]).cached == 0


def test_a_reset_empties_the_cache(client: TestClient) -> None:
    assert [one.cached for one in ask_chat(client, LONG, 2)] == [0, OPENAI_READ]
    assert client.post("/_sim/reset", json={"latency": 0.0}).status_code == 200
    assert [one.cached for one in ask_chat(client, LONG, 1)] == [0]


@pytest.mark.parametrize("kind", ["openai_chat", "anthropic_messages"])
def test_a_gateways_extra_attempt_meets_the_cache_first(client: TestClient, kind: str) -> None:
    """The gateway's extra attempt was made (and charged) before the request's own: it wrote
    the prefix, so the answer the client sees already reads it."""
    face = FACES[kind]
    faults = "create:gateway_retries#1;retries=1"
    assert client.post("/_sim/reset", json={"latency": 0.0, "faults": faults}).status_code == 200
    (own,) = face.ask(client, face.system(LONG), 1)
    assert own.cached == (LONG_TOKENS if face.anthropic else OPENAI_READ)
    (extra, _), (charge, paid) = charged(client)
    assert extra.cached == 0 and charge == own and paid == cost(own, face.discount)


# --- the bill of the paths that end early ---------------------------------------------------------


def test_a_cancelled_openai_batch_is_billed_for_what_ran_at_half_price(client: TestClient) -> None:
    client.post("/_sim/hold", json={"held": True}).raise_for_status()
    batch_id = openai_batch(client, LONG, 4)
    client.post(f"/v1/batches/{batch_id}/cancel").raise_for_status()
    time.sleep(0.06)  # cancelling, then cancelled
    assert client.get(f"/v1/batches/{batch_id}").json()["status"] == "cancelled"
    ((used, paid),) = charged(client)
    # Billed as before: the prompt once and the posts of the half that ran, none cached.
    ran_posts = [post["id"] for n in range(2) for post in posts_of(n)]
    (charge,) = client.get("/_sim/charges").json()["charges"]
    assert charge["post_ids"] == ran_posts
    assert used.input == count_tokens(LONG) + 2 * sum(count_tokens(text) for text in TEXTS)
    assert (used.cached, used.written) == (0, 0)
    assert paid == cost(used, 50) and charge["discount"] == 50


def test_a_cancelled_message_batch_takes_back_its_charges_and_their_cost(
    client: TestClient,
) -> None:
    client.post("/_sim/hold", json={"held": True}).raise_for_status()
    batch_id = message_batch(client, marked(LONG), 2)
    deadline = time.monotonic() + 10
    while len(client.get("/_sim/charges").json()["charges"]) < 2:  # run in the app's own time
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert client.get("/_sim/bill").json()["cost"] > 0
    client.post(f"/v1/messages/batches/{batch_id}/cancel", headers=ANTHROPIC_HEADERS)
    lines = ended_message_batch(client, batch_id)
    assert [line["result"]["type"] for line in lines] == ["canceled"] * 2
    assert client.get("/_sim/bill").json() == {"cost": 0, "charges": 0}


# --- a simulator process, and the tests' helper ---------------------------------------------------


def test_the_bill_of_a_simulator_process_is_its_charges_costs_summed() -> None:
    with simulator_process(latency=0.0) as url, httpx.Client(base_url=url) as http:
        answers = [http.post(ENDPOINT, json=chat_body(LONG, n)).json() for n in range(2)]
        used = [openai_used(answer["usage"]) for answer in answers]
        assert [one.cached for one in used] == [0, OPENAI_READ]
        sim = Sim(url)
        assert [charge["cost"] for charge in sim.charges()] == [cost(one, 0) for one in used]
        assert sim.bill() == sum(cost(one, 0) for one in used)
