"""postledger deployed the Prefect way, against a real `prefect server start` on PostgreSQL:
`postledger setup`, `prefect deploy --all`, workers, triggered runs that complete, configured
by Blocks only (no POSTLEDGER_* variable reaches the workers), with the ledger on PostgreSQL.

The flows run in processes the workers start, so everything is observed from outside: the
Prefect API, the ledger, and the simulator's own charge log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from postledger.ledger import Ledger
from postledger.record.models import PostStatus
from simulator.sample import generate_posts, write_posts
from tests.support.commands import run_process
from tests.support.databases import fresh_database
from tests.support.ledgers import ledger_text
from tests.support.prefect_server import PrefectServer
from tests.support.processes import spawn, stop
from tests.support.repo import REPO
from tests.support.simulators import Sim, simulator_process

pytestmark = [
    pytest.mark.xdist_group("prefect_server"),  # shares one real server with the UI test
    pytest.mark.processes,  # workers, `prefect deploy`, flows in the workers' processes
]

API_KEY = "fake-key-for-the-deployment-test"  # must never be seen outside the Authorization header
DB_PASSWORD = "pw-e2e-ledger-81e4c0"  # trust auth ignores it; it must never be seen either
POOL = "postledger"


@dataclass
class Deployed:
    server: PrefectServer
    env: dict[str, str]
    sim: Sim
    ledger_url: str
    work: Path
    worker_logs: list[Path]


def _run(args: list[str], env: dict[str, str], cwd: Path = REPO) -> str:
    done = run_process(args, env=env, cwd=cwd)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def deployed(
    prefect_server: PrefectServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployed]:
    """Set up, deployed, with two workers polling the pool."""
    work = tmp_path_factory.mktemp("deployed")
    env = prefect_server.client_env(work / "client-home")
    for name in [n for n in env if n.startswith("POSTLEDGER_") and "_TEST_" not in n]:
        del env[name]  # the workers know only what the blocks say (and the test's mark)
    env.update(
        {
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PREFECT_CLI_PROMPT": "false",
            "PREFECT_LOGGING_LEVEL": "INFO",  # so that the run's logs can be searched too
        }
    )

    with (
        fresh_database() as plain_url,
        simulator_process(latency=0.5, api_key=API_KEY) as sim_url,
    ):
        # The same database, with a password in the URL: the ledger block keeps it secret.
        ledger_url = plain_url.replace("postgres@", f"postgres:{DB_PASSWORD}@", 1)
        assert DB_PASSWORD in ledger_url
        setup_env = {**env, "POSTLEDGER_DATABASE_URL": ledger_url}
        out = _run([sys.executable, "-m", "cli", "setup"], setup_env)
        assert DB_PASSWORD not in out and f"work pool {POOL}" in out
        spill = work / "spill"  # shared by both workers, as a shared volume would be
        spill.mkdir()
        _run([sys.executable, "-c", _SAVE_BLOCKS, sim_url, API_KEY, ledger_url, str(spill)], env)
        _run([sys.executable, "-m", "prefect", "deploy", "--all"], env)

        workers, logs = [], []
        for n in range(2):
            log = work / f"worker-{n}.log"
            with open(log, "wb") as sink:
                workers.append(
                    spawn(
                        [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL],
                        env=env,
                        cwd=REPO,
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                    )
                )
            logs.append(log)
        try:
            yield Deployed(prefect_server, env, Sim(sim_url), ledger_url, work, logs)
        finally:
            for worker in workers:  # both asked at once, then each waited for
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGTERM)
            for worker in workers:
                stop(worker, timeout=20)


_SAVE_BLOCKS = """
import sys
from pydantic import SecretStr
from blocks import PostledgerLedger, PostledgerUpstream
url, key, ledger_url, spill = sys.argv[1:5]
upstream = PostledgerUpstream(base_url=url, name="e2e-sim", api_key=SecretStr(key))
upstream.save("sim", overwrite=True)
PostledgerLedger(database_url=SecretStr(ledger_url), spill_path=spill).save("main", overwrite=True)
"""


def _posts(deployed: Deployed, month: str, count: int) -> str:
    path = deployed.work / f"{month}.jsonl"
    write_posts(path, generate_posts(month, count, seed=11))
    return str(path)


def _trigger(deployed: Deployed, month: str, posts_path: str) -> str:
    deployment = httpx.get(
        f"{deployed.server.api_url}/deployments/name/monthly-posts/monthly", timeout=30
    )
    deployment.raise_for_status()
    deployment_id = deployment.json()["id"]
    run = httpx.post(
        f"{deployed.server.api_url}/deployments/{deployment_id}/create_flow_run",
        json={
            "parameters": {
                "month": month,
                "posts_path": posts_path,
                "upstream_block": "sim",
                "ledger_block": "main",
            }
        },
        timeout=30,
    )
    run.raise_for_status()
    return str(run.json()["id"])


def _runs(deployed: Deployed, run_ids: list[str]) -> list[Any]:
    return [
        httpx.get(f"{deployed.server.api_url}/flow_runs/{run_id}", timeout=30).json()
        for run_id in run_ids
    ]


def _wait_final(deployed: Deployed, run_ids: list[str], timeout: float = 240) -> list[Any]:
    def final() -> bool:
        states = [run["state"]["type"] for run in _runs(deployed, run_ids)]
        return all(state in ("COMPLETED", "FAILED", "CRASHED") for state in states)

    _wait_until(final, deployed, timeout)
    return _runs(deployed, run_ids)


def _completed_and_charged_once(deployed: Deployed, month: str, count: int) -> None:
    ledger = Ledger(deployed.ledger_url)
    posts = ledger.posts(month)
    ledger.close()
    assert len(posts) == count
    assert {p.status for p in posts} == {PostStatus.COMPLETED}
    charged = [
        post_id
        for charge in deployed.sim.charges()
        for post_id in charge["post_ids"]
        if post_id in {p.post_id for p in posts}
    ]
    assert sorted(charged) == sorted(p.post_id for p in posts)


def test_a_triggered_run_of_the_deployment_completes_with_the_ledger_on_postgresql(
    deployed: Deployed,
) -> None:
    month, count = "2026-08", 40
    run_id = _trigger(deployed, month, _posts(deployed, month, count))
    (run,) = _wait_final(deployed, [run_id])
    assert run["state"]["type"] == "COMPLETED", run["state"]
    assert run["deployment_id"] and run["work_pool_name"] == POOL
    _completed_and_charged_once(deployed, month, count)
    assert deployed.sim.stats()["max_in_flight"] <= 2
    _secrets_are_nowhere(deployed, run_id)


def test_two_months_started_together_share_the_limit_of_two(deployed: Deployed) -> None:
    months, count = ["2026-06", "2026-07"], 100  # 4 batches each
    before = len(deployed.sim.charges())
    # No batch ends until both runs are running: they overlap by construction, not by luck.
    deployed.sim.hold(True)
    try:
        run_ids = [_trigger(deployed, month, _posts(deployed, month, count)) for month in months]

        def both_busy() -> bool:
            return _both_running(deployed, run_ids) and _in_flight(deployed) == 2

        _wait_until(both_busy, deployed)
        # Both runs are running and two batches are in flight: the other run's batches wait.
        time.sleep(2)
        assert _in_flight(deployed) == 2
        assert len(deployed.sim.charges()) - before == 2
    finally:
        deployed.sim.hold(False)
    runs = _wait_final(deployed, run_ids)
    assert [run["state"]["type"] for run in runs] == ["COMPLETED", "COMPLETED"]
    for month in months:
        _completed_and_charged_once(deployed, month, count)
    spans = [
        (datetime.fromisoformat(r["start_time"]), datetime.fromisoformat(r["end_time"]))
        for r in runs
    ]
    assert max(s for s, _ in spans) < min(e for _, e in spans), f"runs did not overlap: {spans}"
    charges = deployed.sim.charges()[before:]
    # Never more than two batches in flight between them.
    assert deployed.sim.stats()["max_in_flight"] <= 2
    assert _peak_from_charge_log(charges) <= 2


def _in_flight(deployed: Deployed) -> int:
    return int(deployed.sim.stats()["in_flight"])


def _both_running(deployed: Deployed, run_ids: list[str]) -> bool:
    return all(run["state"]["type"] == "RUNNING" for run in _runs(deployed, run_ids))


def _wait_until(ready: Callable[[], bool], deployed: Deployed, timeout: float = 180) -> None:
    """Until `ready()`; past `timeout`, fail with the tail of each worker's log."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            logs = "\n".join(p.read_text(errors="replace")[-4000:] for p in deployed.worker_logs)
            raise AssertionError(f"{ready.__name__}: not within {timeout} s\n{logs}")
        time.sleep(0.5)


def _peak_from_charge_log(charges: list[dict[str, Any]]) -> int:
    events = sorted(
        [(c["at"], 1) for c in charges] + [(c["done_at"], -1) for c in charges if c["done_at"]]
    )
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def _secrets_are_nowhere(deployed: Deployed, run_id: str) -> None:
    api = deployed.server.api_url

    def read(method: str, path: str, body: dict[str, Any] | None = None) -> str:
        response = httpx.request(method, f"{api}{path}", json=body, timeout=30)
        response.raise_for_status()
        return response.text

    seen = {
        "logs": read("POST", "/logs/filter", {"limit": 200}),
        "artifacts": read("POST", "/artifacts/filter", {"limit": 200}),
        "flow run": read("GET", f"/flow_runs/{run_id}"),
        "task runs": read("POST", "/task_runs/filter", {"limit": 200}),
        "events": read("POST", "/events/filter", {"limit": 50}),
        "workers": "".join(p.read_text(errors="replace") for p in deployed.worker_logs),
        "server": deployed.server.log(),
        "ledger": ledger_text(deployed.ledger_url),
    }
    # There is something to see: the run's logs, its artifacts, its events, the ledger.
    assert all(len(seen[where]) > 1000 for where in ("logs", "artifacts", "events", "ledger"))
    for where, content in seen.items():
        assert API_KEY not in content, f"the API key is in the {where}"
        assert DB_PASSWORD not in content, f"the ledger's password is in the {where}"
