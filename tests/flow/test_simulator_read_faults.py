"""The simulator's READ-side faults, over loopback HTTP: a poll, a results download or a listing
answered with a captive-portal page, a cut body, valid JSON of the wrong shape, an undocumented
status, a results_url on another host, a results file cut mid-line or missing a line — each
spoiling one answer, the next read giving the true one; `per_id` counting; and what `fired`
says each fault hit. (The faults: `simulator.faults`; how they spoil: `simulator.read_faults`.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from simulator.faults import load_plan, parse_compact
from tests.support.simulators import simulator_process

LATENCY = 0.01
SETTLE = 0.05  # seconds after a create by which its job has ended (no poll spent on waiting)
MODEL = "sim-analyst-1"
POSTS = [("p1", "I love it, thanks!"), ("p2", "Why is it broken?"), ("p3", "Please add dark mode")]
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}
# One client for the module's loopback calls: each new client builds a TLS context it never uses.
HTTP = httpx.Client(timeout=10)


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with simulator_process(latency=LATENCY) as url:
        _JOBS.pop(url, None)  # leased anew (reset): the jobs made on it before are gone
        yield url


_JOBS: dict[str, Jobs] = {}  # per simulator URL: the jobs the cases read, until a reset


def arm(url: str, spec: str) -> None:
    """These faults (compact form) in force, by POST /_sim/faults (its JSON form): counts and
    `fired` start again, the jobs made stay."""
    plan = parse_compact(spec).model_dump(mode="json")
    HTTP.post(f"{url}/_sim/faults", json=plan).raise_for_status()


def reset(url: str, faults: str) -> None:
    """POST /_sim/reset with these faults (compact form): every job is forgotten."""
    HTTP.post(f"{url}/_sim/reset", json={"latency": LATENCY, "faults": faults}).raise_for_status()
    _JOBS.pop(url, None)


def fired(url: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = HTTP.get(f"{url}/_sim/faults").json()["fired"]
    return entries


def charge_of(url: str, task_id: str) -> dict[str, Any]:
    charges: list[dict[str, Any]] = HTTP.get(f"{url}/_sim/charges").json()["charges"]
    (charge,) = [c for c in charges if c["task_id"] == task_id]
    return charge


def jsonl(content: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in content.splitlines()]


# --- one job of three posts, in each protocol ---------------------------------------------------


def make_task(url: str) -> str:
    posts = [{"id": post_id, "text": text} for post_id, text in POSTS]
    made = HTTP.post(f"{url}/v1/tasks", json={"model": MODEL, "prompt": "Analyse.", "posts": posts})
    task_id: str = made.raise_for_status().json()["task_id"]
    return task_id


def _user_message(post_id: str, text: str) -> dict[str, str]:
    return {"role": "user", "content": json.dumps({"posts": [{"id": post_id, "text": text}]})}


def make_openai_batch(url: str) -> str:
    """A Batch API job of three requests, `r1`..`r3`, one post each."""
    lines = [
        {
            "custom_id": f"r{number}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": MODEL, "messages": [_user_message(post_id, text)]},
        }
        for number, (post_id, text) in enumerate(POSTS, start=1)
    ]
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    upload = HTTP.post(
        f"{url}/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"}
    )
    input_file_id = upload.raise_for_status().json()["id"]
    asked = {"input_file_id": input_file_id, "endpoint": "/v1/chat/completions"}
    made = HTTP.post(f"{url}/v1/batches", json={**asked, "completion_window": "24h"})
    batch_id: str = made.raise_for_status().json()["id"]
    return batch_id


def make_anthropic_batch(url: str) -> str:
    """A Message Batch of three requests, `r1`..`r3`, one post each."""
    requests = [
        {
            "custom_id": f"r{number}",
            "params": {
                "model": MODEL,
                "max_tokens": 1024,
                "messages": [_user_message(post_id, text)],
            },
        }
        for number, (post_id, text) in enumerate(POSTS, start=1)
    ]
    made = HTTP.post(
        f"{url}/v1/messages/batches", json={"requests": requests}, headers=ANTHROPIC_HEADERS
    )
    batch_id: str = made.raise_for_status().json()["id"]
    return batch_id


@dataclass(frozen=True)
class Protocol:
    make: Callable[[str], str]  # makes a job on the simulator at this URL; returns its id
    state: str  # the path of its state, `{}` for its id
    id_field: str
    status_field: str
    ended: str  # its status once it ended well

    def read(self, url: str, job_id: str) -> httpx.Response:
        return HTTP.get(url + self.state.format(job_id), headers=ANTHROPIC_HEADERS)

    def assert_true(self, answer: httpx.Response, job_id: str) -> None:
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        body = answer.json()
        assert body[self.id_field] == job_id and body[self.status_field] == self.ended


PROTOCOLS = {
    "task_api": Protocol(make_task, "/v1/tasks/{}", "task_id", "status", "succeeded"),
    "openai_batch": Protocol(make_openai_batch, "/v1/batches/{}", "id", "status", "completed"),
    "anthropic_batch": Protocol(
        make_anthropic_batch, "/v1/messages/batches/{}", "id", "processing_status", "ended"
    ),
}


def ended_job(url: str, kind: str) -> str:
    """A job of this protocol, made and ended (no poll spent on waiting for it)."""
    job_id = PROTOCOLS[kind].make(url)
    time.sleep(SETTLE)
    return job_id


@dataclass(frozen=True)
class Jobs:
    """One ended job of each protocol, made once for the module's cases to read (a case arms
    its faults with POST /_sim/faults, which keeps them)."""

    ids: dict[str, str]  # protocol -> its job's id
    results: dict[str, str]  # protocol -> the path its results are downloaded from

    @classmethod
    def make(cls, url: str) -> Jobs:
        ids = {kind: protocol.make(url) for kind, protocol in PROTOCOLS.items()}
        time.sleep(SETTLE)
        # An OpenAI batch's output file is named by a poll (the `poll` route, not `results`).
        batch = PROTOCOLS["openai_batch"].read(url, ids["openai_batch"]).json()
        results = {
            "openai_batch": f"/v1/files/{batch['output_file_id']}/content",
            "anthropic_batch": f"/v1/messages/batches/{ids['anthropic_batch']}/results",
        }
        return cls(ids, results)

    def results_id(self, kind: str) -> str:
        """The upstream id a results download reads: the file, or the Message Batch."""
        return self.results[kind].split("/")[3 if kind == "openai_batch" else 4]


@pytest.fixture
def jobs(sim: str) -> Jobs:
    """The module's jobs, made on a simulator reset to no faults the first time a case asks."""
    if sim not in _JOBS:
        HTTP.post(f"{sim}/_sim/reset", json={"latency": LATENCY}).raise_for_status()
        _JOBS[sim] = Jobs.make(sim)
    return _JOBS[sim]


# --- poll -------------------------------------------------------------------------------------


def check_html(answer: httpx.Response) -> None:
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/html")
    assert "<html>" in answer.text


def check_cut_json(answer: httpx.Response, protocol: Protocol, job_id: str) -> None:
    assert answer.headers["content-type"] == "application/json"
    assert int(answer.headers["content-length"]) == len(answer.content)
    assert answer.text.startswith("{") and job_id in answer.text
    with pytest.raises(ValueError):
        json.loads(answer.content)


def check_wrong_shape(answer: httpx.Response, protocol: Protocol, job_id: str) -> None:
    assert answer.headers["content-type"] == "application/json"
    assert isinstance(answer.json(), list)  # the first request: a list (then an object)


def check_bad_status(answer: httpx.Response, protocol: Protocol, job_id: str) -> None:
    body = answer.json()
    assert body[protocol.id_field] == job_id and body[protocol.status_field] == "paused"


POLL_CHECKS: dict[str, Callable[[httpx.Response, Protocol, str], None]] = {
    "html": lambda answer, _, __: check_html(answer),
    "cut_json": check_cut_json,
    "wrong_shape": check_wrong_shape,
    "bad_status": check_bad_status,
}


@pytest.mark.parametrize("kind", PROTOCOLS)
@pytest.mark.parametrize("fault", POLL_CHECKS)
def test_a_spoiled_poll_answer_is_followed_by_the_true_one(
    sim: str, jobs: Jobs, kind: str, fault: str
) -> None:
    protocol, job_id = PROTOCOLS[kind], jobs.ids[kind]
    arm(sim, f"poll:{fault}#1")
    spoiled = protocol.read(sim, job_id)
    assert spoiled.status_code == 200
    POLL_CHECKS[fault](spoiled, protocol, job_id)
    protocol.assert_true(protocol.read(sim, job_id), job_id)
    assert fired(sim) == [{"on": "poll", "fault": fault, "n": 1, "id": job_id}]


def test_a_wrong_shape_is_a_list_then_an_object_of_none_of_the_fields(sim: str, jobs: Jobs) -> None:
    protocol, job_id = PROTOCOLS["openai_batch"], jobs.ids["openai_batch"]
    arm(sim, "poll:wrong_shape#1+2")
    assert isinstance(protocol.read(sim, job_id).json(), list)
    second = protocol.read(sim, job_id).json()
    assert isinstance(second, dict) and not {"id", "status"} & set(second)
    protocol.assert_true(protocol.read(sim, job_id), job_id)


def test_an_ended_message_batchs_results_url_names_anthropic_its_results_stay_here(
    sim: str, jobs: Jobs
) -> None:
    protocol, job_id = PROTOCOLS["anthropic_batch"], jobs.ids["anthropic_batch"]
    arm(sim, "poll:foreign_results_url#1")
    spoiled = protocol.read(sim, job_id).json()
    assert spoiled["processing_status"] == "ended"
    assert (
        spoiled["results_url"] == f"https://api.anthropic.com/v1/messages/batches/{job_id}/results"
    )
    true = protocol.read(sim, job_id).json()
    assert true["results_url"] == f"{sim}/v1/messages/batches/{job_id}/results"
    results = HTTP.get(true["results_url"], headers=ANTHROPIC_HEADERS)
    assert [line["custom_id"] for line in jsonl(results.content)] == ["r1", "r2", "r3"]
    assert fired(sim) == [{"on": "poll", "fault": "foreign_results_url", "n": 1, "id": job_id}]


def test_a_foreign_results_url_changes_nothing_where_there_is_no_ended_message_batch(
    sim: str, jobs: Jobs
) -> None:
    arm(sim, "poll:foreign_results_url@1")
    for kind in ("task_api", "openai_batch"):
        PROTOCOLS[kind].assert_true(PROTOCOLS[kind].read(sim, jobs.ids[kind]), jobs.ids[kind])
    HTTP.post(f"{sim}/_sim/hold", json={"held": True}).raise_for_status()
    try:
        running = make_anthropic_batch(sim)
        answer = PROTOCOLS["anthropic_batch"].read(sim, running).json()
    finally:
        HTTP.post(f"{sim}/_sim/hold", json={"held": False}).raise_for_status()
    assert answer["processing_status"] == "in_progress" and answer["results_url"] is None
    assert [(entry["id"], entry.get("applied")) for entry in fired(sim)] == [
        (jobs.ids["task_api"], False),
        (jobs.ids["openai_batch"], False),
        (running, False),
    ]


# --- results ----------------------------------------------------------------------------------

RESULTS_KINDS = ["openai_batch", "anthropic_batch"]


def download(url: str) -> httpx.Response:
    return HTTP.get(url, headers=ANTHROPIC_HEADERS)


def assert_whole(answer: httpx.Response) -> None:
    assert answer.status_code == 200
    assert [line["custom_id"] for line in jsonl(answer.content)] == ["r1", "r2", "r3"]


def results_entry(jobs: Jobs, kind: str, fault: str, n: int = 1) -> dict[str, Any]:
    """What `fired` says a results fault hit: the file (and its batch), or the Message Batch."""
    entry = {"on": "results", "fault": fault, "n": n, "id": jobs.results_id(kind)}
    if kind == "openai_batch":
        entry["batch_id"] = jobs.ids[kind]
    return entry


@pytest.mark.parametrize("kind", RESULTS_KINDS)
@pytest.mark.parametrize("fault", ["reset", "timeout", "html"])
def test_a_results_download_meets_a_reset_a_timeout_and_a_captive_portal(
    sim: str, jobs: Jobs, kind: str, fault: str
) -> None:
    arm(sim, f"results:{fault}#1;hold=0.1")
    url = sim + jobs.results[kind]
    if fault == "reset":
        with pytest.raises(httpx.TransportError):
            download(url)
    elif fault == "timeout":
        assert download(url).status_code == 504
    else:
        check_html(download(url))
    assert_whole(download(url))
    assert fired(sim) == [results_entry(jobs, kind, fault)]


@pytest.mark.parametrize(("kind", "overloaded"), [("openai_batch", 503), ("anthropic_batch", 529)])
def test_a_results_download_meets_server_errors(
    sim: str, jobs: Jobs, kind: str, overloaded: int
) -> None:
    arm(sim, "results:http_500#1,results:http_502#2,results:http_503#3,results:http_504#4")
    url = sim + jobs.results[kind]
    assert [download(url).status_code for _ in range(4)] == [500, 502, overloaded, 504]
    assert_whole(download(url))
    assert [entry["id"] for entry in fired(sim)] == [jobs.results_id(kind)] * 4


@pytest.mark.parametrize("kind", RESULTS_KINDS)
def test_a_results_file_cut_mid_line_is_followed_by_the_whole_file(
    sim: str, jobs: Jobs, kind: str
) -> None:
    arm(sim, "results:cut_file#1")
    cut, whole = download(sim + jobs.results[kind]), download(sim + jobs.results[kind])
    assert cut.status_code == 200
    assert int(cut.headers["content-length"]) == len(cut.content)
    assert whole.content.startswith(cut.content) and not cut.content.endswith(b"\n")
    assert len(cut.content) in (len(whole.content) // 2, len(whole.content) // 2 - 1)
    assert_whole(whole)
    assert fired(sim) == [results_entry(jobs, kind, "cut_file")]


@pytest.mark.parametrize("kind", RESULTS_KINDS)
def test_a_results_file_missing_a_line_names_it_in_fired(sim: str, jobs: Jobs, kind: str) -> None:
    arm(sim, "results:missing_lines#1")
    short, whole = download(sim + jobs.results[kind]), download(sim + jobs.results[kind])
    assert_whole(whole)
    (missing,) = [line for line in jsonl(whole.content) if line not in jsonl(short.content)]
    assert len(jsonl(short.content)) == 2
    expected = {**results_entry(jobs, kind, "missing_lines"), "custom_id": missing["custom_id"]}
    assert fired(sim) == [expected]


# --- list -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["reset", "timeout", "html", "cut_json"])
def test_a_batch_listing_meets_its_faults_then_lists_truly(
    sim: str, jobs: Jobs, fault: str
) -> None:
    arm(sim, f"list:{fault}#1;hold=0.1")
    url = f"{sim}/v1/batches"
    if fault == "reset":
        with pytest.raises(httpx.TransportError):
            HTTP.get(url)
    elif fault == "timeout":
        assert HTTP.get(url).status_code == 504
    elif fault == "html":
        check_html(HTTP.get(url))
    else:
        cut = HTTP.get(url)
        assert cut.status_code == 200 and cut.text.startswith('{"object": "list"')
        with pytest.raises(ValueError):
            json.loads(cut.content)
    listing = HTTP.get(url).json()
    assert jobs.ids["openai_batch"] in [batch["id"] for batch in listing["data"]]
    assert fired(sim) == [{"on": "list", "fault": fault, "n": 1}]  # a first page: no id


def test_a_batch_listing_meets_server_errors_and_names_the_page_it_read(
    sim: str, jobs: Jobs
) -> None:
    arm(sim, "list:http_500#1,list:http_502#2,list:http_503#3,list:http_504#4")
    url = f"{sim}/v1/batches"
    after = {"after": jobs.ids["openai_batch"]}
    statuses = [HTTP.get(url, params=after if n == 4 else {}).status_code for n in range(1, 5)]
    assert statuses == [500, 502, 503, 504]
    assert HTTP.get(url).json()["object"] == "list"
    assert [entry.get("id") for entry in fired(sim)] == [None, None, None, after["after"]]


# --- per_id, and what `fired` says each fault hit ---------------------------------------------


def test_per_id_counts_the_polls_of_each_upstream_id(sim: str, jobs: Jobs) -> None:
    """Given in the JSON form: the first poll of each upstream id is spoiled, whatever its
    protocol."""
    rule = {"on": "poll", "fault": "html", "nth": [1], "per_id": True}
    HTTP.post(f"{sim}/_sim/faults", json={"seed": 0, "rules": [rule]}).raise_for_status()
    task, batch = PROTOCOLS["task_api"], PROTOCOLS["openai_batch"]
    task_id, batch_id = jobs.ids["task_api"], jobs.ids["openai_batch"]
    check_html(task.read(sim, task_id))
    task.assert_true(task.read(sim, task_id), task_id)
    check_html(batch.read(sim, batch_id))
    batch.assert_true(batch.read(sim, batch_id), batch_id)
    task.assert_true(task.read(sim, task_id), task_id)
    assert fired(sim) == [
        {"on": "poll", "fault": "html", "n": 1, "n_of_id": 1, "id": task_id},
        {"on": "poll", "fault": "html", "n": 3, "n_of_id": 1, "id": batch_id},
    ]


def test_without_per_id_nth_counts_the_route(sim: str, jobs: Jobs) -> None:
    task, batch = PROTOCOLS["task_api"], PROTOCOLS["openai_batch"]
    task_id, batch_id = jobs.ids["task_api"], jobs.ids["openai_batch"]
    arm(sim, "poll:html#2")
    task.assert_true(task.read(sim, task_id), task_id)
    check_html(batch.read(sim, batch_id))
    batch.assert_true(batch.read(sim, batch_id), batch_id)
    assert fired(sim) == [{"on": "poll", "fault": "html", "n": 2, "id": batch_id}]


def test_task_and_output_faults_name_the_charged_task_and_the_post(sim: str) -> None:
    """Given at a reset, in the compact form."""
    reset(sim, "task:task_failed#1,output:bad_field#1")
    task_id = make_task(sim)
    charge = charge_of(sim, task_id)
    task_fault, output_fault = fired(sim)
    assert task_fault == {"on": "task", "fault": "task_failed", "n": 1, "id": task_id}
    assert output_fault["id"] == task_id and output_fault["post_id"] in charge["post_ids"]


def test_a_batch_requests_fault_names_its_request(sim: str) -> None:
    arm(sim, "output:request_error#1")
    batch_id = ended_job(sim, "openai_batch")
    error_file = PROTOCOLS["openai_batch"].read(sim, batch_id).json()["error_file_id"]
    (failed,) = jsonl(HTTP.get(f"{sim}/v1/files/{error_file}/content").content)
    (entry,) = fired(sim)
    assert entry == {
        "on": "output",
        "fault": "request_error",
        "n": 1,
        "id": entry["id"],
        "batch_id": batch_id,
        "custom_id": failed["custom_id"],
    }
    assert charge_of(sim, entry["id"])["post_ids"] == [post_id for post_id, _ in POSTS]


def test_a_message_batchs_faults_name_its_requests(sim: str) -> None:
    """A request a task fault keeps from running is never charged: no id, its custom_id."""
    arm(sim, "task:task_failed#2,output:bad_field#1")
    batch_id = make_anthropic_batch(sim)
    output_fault, task_fault = fired(sim)  # r1's output is decided before r2's task
    assert task_fault == {
        "on": "task",
        "fault": "task_failed",
        "n": 2,
        "batch_id": batch_id,
        "custom_id": "r2",
    }
    assert output_fault["on"] == "output" and output_fault["custom_id"] == "r1"
    assert charge_of(sim, output_fault["id"])["post_ids"] == [output_fault["post_id"]] == ["p1"]


# --- the ways a fault plan is given -------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("results:forget#1", "known for results: cut_file, html, http_500"),
        ("list:wrong_shape#1", "known for list: cut_json, html"),
        ("poll:cut_file#1", "known for poll: auth, bad_status, cut_json, foreign_results_url"),
        ("create:http_503#1;per_id=true", "per_id counts the reads"),
    ],
)
def test_a_fault_a_route_does_not_know_is_refused_listing_the_known(
    sim: str, spec: str, said: str
) -> None:
    refused = HTTP.post(f"{sim}/_sim/reset", json={"latency": LATENCY, "faults": spec})
    assert refused.status_code == 422 and said in refused.text  # (nothing was forgotten)
    with pytest.raises(ValueError, match=said):
        parse_compact(spec)


def test_every_read_fault_is_spelt_in_the_compact_form() -> None:
    """As `postledger sim serve --faults` and POST /_sim/reset take them (`load_plan`)."""
    spec = (
        "poll:html#1;per_id=true,poll:cut_json@0.1,poll:wrong_shape#2,poll:bad_status#3,"
        "poll:foreign_results_url@1,results:reset#1,results:timeout#1;hold=2,results:http_502#1,"
        "results:html#1,results:cut_file#1;per_id=true,results:missing_lines@0.5,list:reset#1,"
        "list:http_503#2,list:html#3,list:cut_json#4"
    )
    rules = load_plan(spec, None, seed=4).rules
    assert [f"{rule.on.value}:{rule.fault}" for rule in rules] == [
        part.split("#")[0].split("@")[0] for part in spec.split(",")
    ]
    assert [rule.per_id for rule in rules].count(True) == 2
