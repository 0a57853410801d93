"""The simulator playing a gateway that retried on its own (`create:gateway_retries`,
`create:gateway_retries_then_500`), over loopback HTTP, on each of its five create routes: the
`x-litellm-attempted-retries` header, the extra attempts' charges in the charge log (and, for
the Batch API, the extra batches in the listing), and what `fired` says the gateway charged;
and what `fired` says a create whose answer was lost after the work was made charged
(`create:http_500_after_create`). (The faults: `simulator.faults`; how the gateway is played:
`simulator.gateway`.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from simulator.faults import FaultPlan, parse_compact
from simulator.gateway import ATTEMPTED_RETRIES
from tests.support.simulators import simulator_process

LATENCY = 0.01
MODEL = "sim-analyst-1"
POSTS = [("p1", "I love it, thanks!"), ("p2", "Why is it broken?")]
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}
METADATA = {"postledger_key": "run-1:batch-1"}
# One client for the module's loopback calls: each new client builds a TLS context it never uses.
HTTP = httpx.Client(timeout=10)


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with simulator_process(latency=LATENCY) as url:
        yield url


def reset(url: str, faults: str, *, honour_keys: bool = True) -> None:
    """POST /_sim/reset with these faults (compact form): no job, charge or count is left."""
    options = {"latency": LATENCY, "faults": faults, "honour_keys": honour_keys}
    HTTP.post(f"{url}/_sim/reset", json=options).raise_for_status()


def charges(url: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = HTTP.get(f"{url}/_sim/charges").json()["charges"]
    return found


def fired(url: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = HTTP.get(f"{url}/_sim/faults").json()["fired"]
    return entries


# --- one create of two posts, in each protocol ------------------------------------------------


def create_task(url: str, key: str | None = "key-1") -> httpx.Response:
    posts = [{"id": post_id, "text": text} for post_id, text in POSTS]
    headers = {"Idempotency-Key": key} if key is not None else {}
    body = {"model": MODEL, "prompt": "Analyse.", "posts": posts}
    return HTTP.post(f"{url}/v1/tasks", json=body, headers=headers)


def _user_message(posts: list[tuple[str, str]]) -> dict[str, str]:
    content = {"posts": [{"id": post_id, "text": text} for post_id, text in posts]}
    return {"role": "user", "content": json.dumps(content)}


def create_completion(url: str) -> httpx.Response:
    body = {"model": MODEL, "messages": [_user_message(POSTS)]}
    return HTTP.post(f"{url}/v1/chat/completions", json=body)


def create_openai_batch(url: str) -> httpx.Response:
    """A Batch API job of two requests, one post each."""
    lines = [
        {
            "custom_id": f"r{number}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": MODEL, "messages": [_user_message([post])]},
        }
        for number, post in enumerate(POSTS, start=1)
    ]
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    upload = HTTP.post(
        f"{url}/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"}
    )
    asked = {
        "input_file_id": upload.raise_for_status().json()["id"],
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        "metadata": METADATA,
    }
    return HTTP.post(f"{url}/v1/batches", json=asked)


def create_message(url: str) -> httpx.Response:
    body = {"model": MODEL, "max_tokens": 1024, "messages": [_user_message(POSTS)]}
    return HTTP.post(f"{url}/v1/messages", json=body, headers=ANTHROPIC_HEADERS)


def create_message_batch(url: str) -> httpx.Response:
    """A Message Batch of two requests, one post each: each request is a charge of its own."""
    requests = [
        {
            "custom_id": f"r{number}",
            "params": {"model": MODEL, "max_tokens": 1024, "messages": [_user_message([post])]},
        }
        for number, post in enumerate(POSTS, start=1)
    ]
    body = {"requests": requests}
    return HTTP.post(f"{url}/v1/messages/batches", json=body, headers=ANTHROPIC_HEADERS)


def openai_500(answer: httpx.Response) -> bool:
    return bool(answer.json()["error"]["type"] == "server_error")


def anthropic_500(answer: httpx.Response) -> bool:
    body = answer.json()
    return bool(body["type"] == "error" and body["error"]["type"] == "api_error")


@dataclass(frozen=True)
class CreateRoute:
    create: Callable[[str], httpx.Response]
    charges_per_attempt: int  # a Message Batch: one charge per request
    batch_path: str | None  # where an upstream batch is read, `{}` for its id
    is_500: Callable[[httpx.Response], bool]  # a 500 in the protocol's words


ROUTES = {
    "task_api": CreateRoute(lambda url: create_task(url, key=None), 1, None, openai_500),
    "openai_chat": CreateRoute(create_completion, 1, None, openai_500),
    "openai_batch": CreateRoute(create_openai_batch, 1, "/v1/batches/{}", openai_500),
    "anthropic_messages": CreateRoute(create_message, 1, None, anthropic_500),
    "anthropic_batch": CreateRoute(
        create_message_batch, len(POSTS), "/v1/messages/batches/{}", anthropic_500
    ),
}


def extra_batches_exist(url: str, route: CreateRoute, entry: dict[str, Any], n: int) -> None:
    """`fired` names `n` extra upstream batches, each readable at its id."""
    if route.batch_path is None:
        assert "extra_batches" not in entry
        return
    assert len(entry["extra_batches"]) == len(set(entry["extra_batches"])) == n
    for batch_id in entry["extra_batches"]:
        read = HTTP.get(url + route.batch_path.format(batch_id), headers=ANTHROPIC_HEADERS)
        assert read.status_code == 200 and read.json()["id"] == batch_id


# --- gateway_retries: the extra attempts, then the true answer --------------------------------


@pytest.mark.parametrize("retries", [1, 3])
@pytest.mark.parametrize("kind", ROUTES)
def test_each_extra_attempt_is_charged_and_the_answer_reports_them(
    sim: str, kind: str, retries: int
) -> None:
    route = ROUTES[kind]
    reset(sim, f"create:gateway_retries#1;retries={retries}")
    answer = route.create(sim)
    assert answer.is_success
    assert answer.headers[ATTEMPTED_RETRIES] == str(retries)
    charged = charges(sim)
    assert len(charged) == (1 + retries) * route.charges_per_attempt
    assert all(charge["post_ids"] in (["p1"], ["p2"], ["p1", "p2"]) for charge in charged)
    # The request's own attempt is the last made: the extra charges are the ones before it.
    own = route.charges_per_attempt
    (entry,) = fired(sim)
    assert {key: entry[key] for key in ("on", "fault", "n")} == {
        "on": "create",
        "fault": "gateway_retries",
        "n": 1,
    }
    assert entry["extra_charges"] == [charge["task_id"] for charge in charged[:-own]]
    extra_batches_exist(sim, route, entry, retries if route.batch_path else 0)
    assert ATTEMPTED_RETRIES not in route.create(sim).headers  # the next create: no gateway


def test_the_extra_openai_batches_are_listed_with_the_same_file_and_metadata(sim: str) -> None:
    reset(sim, "create:gateway_retries#1")  # retries=2 by default
    own = create_openai_batch(sim).json()
    listing = HTTP.get(f"{sim}/v1/batches").json()["data"]
    assert [batch["id"] for batch in listing][0] == own["id"]  # the newest: made last
    extra = listing[1:]
    assert len(extra) == 2
    assert all(batch["input_file_id"] == own["input_file_id"] for batch in extra)
    assert all(batch["metadata"] == METADATA for batch in extra)
    (entry,) = fired(sim)
    assert entry["extra_batches"] == [batch["id"] for batch in reversed(extra)]
    keys = [charge["idempotency_key"] for charge in charges(sim)]
    assert keys == [METADATA["postledger_key"]] * 3


# --- gateway_retries_then_500: the extra attempts, then a failure -------------------------------


@pytest.mark.parametrize("kind", ROUTES)
def test_a_failed_create_behind_the_gateway_leaves_the_extra_charges(sim: str, kind: str) -> None:
    route = ROUTES[kind]
    reset(sim, "create:gateway_retries_then_500#1")
    answer = route.create(sim)
    assert answer.status_code == 500 and route.is_500(answer)
    assert answer.headers[ATTEMPTED_RETRIES] == "2"
    charged = charges(sim)
    assert len(charged) == 2 * route.charges_per_attempt  # its own attempt made nothing
    (entry,) = fired(sim)
    assert entry["fault"] == "gateway_retries_then_500"
    assert entry["extra_charges"] == [charge["task_id"] for charge in charged]
    extra_batches_exist(sim, route, entry, 2 if route.batch_path else 0)


# --- the task API's Idempotency-Key -----------------------------------------------------------


@pytest.mark.parametrize("fault", ["gateway_retries", "gateway_retries_then_500"])
def test_an_honoured_key_makes_the_gateways_attempts_one_charge_the_keys(
    sim: str, fault: str
) -> None:
    reset(sim, f"create:{fault}#1")
    answer = create_task(sim, key="key-1")
    assert answer.headers[ATTEMPTED_RETRIES] == "2"
    (charge,) = charges(sim)
    assert fired(sim)[0]["extra_charges"] == []  # the key's charge, not the gateway's
    again = create_task(sim, key="key-1")  # the client's own retry finds it
    assert again.status_code == 202 and again.json()["task_id"] == charge["task_id"]
    if fault == "gateway_retries":
        assert answer.json()["task_id"] == charge["task_id"]
    assert len(charges(sim)) == 1


def test_a_key_the_upstream_does_not_honour_is_charged_at_each_attempt(sim: str) -> None:
    reset(sim, "create:gateway_retries#1", honour_keys=False)
    answer = create_task(sim, key="key-1")
    charged = charges(sim)
    assert [charge["idempotency_key"] for charge in charged] == ["key-1"] * 3
    assert charged[-1]["task_id"] == answer.json()["task_id"]
    assert fired(sim)[0]["extra_charges"] == [charge["task_id"] for charge in charged[:2]]


# --- the extra attempts leave the other rules' draws alone ------------------------------------


def output_faults_fired(url: str, faults: str, honour_keys: bool) -> list[tuple[int, str]]:
    """(n, post) of each output fault that fired over six task API creates."""
    reset(url, faults, honour_keys=honour_keys)
    for number in range(6):
        create_task(url, key=f"key-{number}").raise_for_status()
    return [(e["n"], e["post_id"]) for e in fired(url) if e["on"] == "output"]


@pytest.mark.parametrize("honour_keys", [True, False])
def test_the_extra_attempts_draw_nothing_from_the_other_rules(sim: str, honour_keys: bool) -> None:
    """The same seed gives the same output faults, at the same creates, behind a gateway or
    not. (Under an honoured key the task an extra attempt makes is the request's own: it
    meets the faults the request's task would, once.)"""
    alone = output_faults_fired(sim, "output:bad_field@0.5", honour_keys)
    assert 0 < len(alone) < 6
    gateway = "create:gateway_retries#1+4;retries=3"
    assert output_faults_fired(sim, f"{gateway},output:bad_field@0.5", honour_keys) == alone


def test_a_task_fault_meets_the_requests_own_task_not_an_extra_one(sim: str) -> None:
    reset(sim, "create:gateway_retries#1,task:task_failed#1", honour_keys=False)
    own = create_task(sim).json()["task_id"]
    task_fault = [entry for entry in fired(sim) if entry["on"] == "task"]
    assert task_fault == [{"on": "task", "fault": "task_failed", "n": 1, "id": own}]
    extra = fired(sim)[0]["extra_charges"]
    read = [HTTP.get(f"{sim}/v1/tasks/{task_id}", params={"wait": 5}).json() for task_id in extra]
    assert [task["status"] for task in read] == ["succeeded", "succeeded"]
    assert HTTP.get(f"{sim}/v1/tasks/{own}", params={"wait": 5}).json()["status"] == "failed"


# --- a create answer lost after the work was made: what `fired` says it charged --------------


@pytest.mark.parametrize("kind", ROUTES)
def test_a_create_answer_lost_after_the_work_names_the_charged_tasks(sim: str, kind: str) -> None:
    route = ROUTES[kind]
    reset(sim, "create:http_500_after_create#1")
    answer = route.create(sim)
    assert answer.status_code == 500 and route.is_500(answer)
    charged = charges(sim)
    assert len(charged) == route.charges_per_attempt  # made and charged all the same
    (entry,) = fired(sim)
    assert {key: entry[key] for key in ("on", "fault", "n")} == {
        "on": "create",
        "fault": "http_500_after_create",
        "n": 1,
    }
    assert entry["made"] == [charge["task_id"] for charge in charged]
    if route.batch_path is None:
        assert "batch_id" not in entry
    else:  # the upstream batch it made, readable at its id
        read = HTTP.get(sim + route.batch_path.format(entry["batch_id"]), headers=ANTHROPIC_HEADERS)
        assert read.status_code == 200 and read.json()["id"] == entry["batch_id"]


def test_a_lost_create_under_a_key_already_honoured_made_nothing(sim: str) -> None:
    reset(sim, "create:http_500_after_create#1+2")
    assert create_task(sim, key="key-1").status_code == 500
    assert create_task(sim, key="key-1").status_code == 500  # the key's task, not charged again
    (charge,) = charges(sim)
    assert [entry["made"] for entry in fired(sim)] == [[charge["task_id"]], []]


# --- the ways the fault is given --------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (
            "create:gateway_retries#1;retries=0",
            "retries\n  Input should be greater than or equal to 1",
        ),
        (
            "create:gateway_retries#1;retries=11",
            "retries\n  Input should be less than or equal to 10",
        ),
        ("create:gateway_retries#1;retries=two", "retries\n  Input should be a valid integer"),
        ("create:gateway_retries#1;retry=2", "retry\n  Extra inputs are not permitted"),
        ("poll:gateway_retries#1", "known for poll"),
    ],
)
def test_a_bad_gateway_rule_is_refused_saying_why(sim: str, spec: str, said: str) -> None:
    refused = HTTP.post(f"{sim}/_sim/reset", json={"latency": LATENCY, "faults": spec})
    assert refused.status_code == 422 and said in refused.json()["error"]["message"]
    with pytest.raises(ValueError, match=said):
        parse_compact(spec)


def test_the_gateway_faults_in_the_compact_form_and_back_from_json() -> None:
    spec = "create:gateway_retries#1+3;retries=4,create:gateway_retries_then_500@0.1,poll:html#1"
    plan = parse_compact(spec)
    assert [(rule.fault, rule.nth, rule.p, rule.retries) for rule in plan.rules] == [
        ("gateway_retries", [1, 3], 0.0, 4),
        ("gateway_retries_then_500", [], 0.1, 2),
        ("html", [1], 0.0, 2),  # (a default no other fault reads)
    ]
    # As POST /_sim/faults takes a plan another process dumped.
    assert FaultPlan.model_validate(plan.model_dump(mode="json")) == plan
