"""The simulator as a client sees it: its task API, its evidence endpoints, and fault plans
set at start (--faults, --scenario) or at run time (POST /_sim/faults)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from simulator.faults import FaultPlan, parse_compact
from simulator.model import analyse
from tests.support.simulators import simulator_process

POSTS = [{"id": "a", "text": "I love it, thanks!"}, {"id": "b", "text": "Why is it broken?"}]


def create(url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/tasks",
        json={"model": "m", "prompt": "p", "posts": POSTS},
        headers={"Idempotency-Key": key},
    )


def test_task_api_idempotency_and_evidence() -> None:
    with simulator_process(latency=0.2) as url:
        first = create(url, "k1")
        again = create(url, "k1")
        assert first.status_code == again.status_code == 202
        task_id = first.json()["task_id"]
        assert again.json()["task_id"] == task_id  # same key, same task
        conflict = httpx.post(
            f"{url}/v1/tasks",
            json={"model": "m", "prompt": "other", "posts": POSTS},
            headers={"Idempotency-Key": "k1"},
        )
        assert conflict.status_code == 422

        done = httpx.get(f"{url}/v1/tasks/{task_id}", params={"wait": 5}).json()
        assert done["status"] == "succeeded"
        assert json.loads(done["output"]) == [analyse(p["id"], p["text"]) for p in POSTS]
        assert done["usage"]["input_tokens"] > 0 and done["usage"]["output_tokens"] > 0
        assert httpx.get(f"{url}/v1/tasks/nope").status_code == 404

        charges = httpx.get(f"{url}/_sim/charges").json()["charges"]
        assert [(c["task_id"], c["idempotency_key"], c["post_ids"]) for c in charges] == [
            (task_id, "k1", ["a", "b"])
        ]
        stats = httpx.get(f"{url}/_sim/stats").json()
        assert stats["requests"]["create"] == 3 and stats["max_in_flight"] == 1


def test_faults_from_a_scenario_file_and_at_run_time(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(
        json.dumps({"seed": 3, "rules": [{"on": "create", "fault": "http_503", "nth": [1]}]}),
        encoding="utf-8",
    )
    with simulator_process(latency=0.1, scenario=str(scenario)) as url:
        assert create(url, "k1").status_code == 503
        assert create(url, "k1").status_code == 202  # the script said: only the 1st

        plan = {"seed": 1, "rules": [{"on": "create", "fault": "quota_429", "p": 1.0}]}
        assert httpx.post(f"{url}/_sim/faults", json=plan).status_code == 200
        refused = create(url, "k2")
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "insufficient_quota"
        assert httpx.get(f"{url}/_sim/faults").json()["fired"] == [
            {"on": "create", "fault": "quota_429", "n": 1}
        ]
        assert len(httpx.get(f"{url}/_sim/charges").json()["charges"]) == 1


def test_compact_fault_specs() -> None:
    plan = parse_compact("create:rate_limit#2+3;retry_after=date:5,output:bad_field@0.25", seed=9)
    assert plan == FaultPlan.model_validate(
        {
            "seed": 9,
            "rules": [
                {"on": "create", "fault": "rate_limit", "nth": [2, 3], "retry_after": "date:5"},
                {"on": "output", "fault": "bad_field", "p": 0.25},
            ],
        }
    )
    with pytest.raises(ValueError, match="known for poll"):
        parse_compact("poll:truncated#1")
    with pytest.raises(ValueError, match="needs a probability"):
        parse_compact("create:http_503")
