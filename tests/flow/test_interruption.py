"""A run killed (SIGKILL) after `running` was persisted and before any output arrived: the
ledger still tells exactly what was started, what was paid and what was not. Recovery itself
is a later issue; here the evidence must simply be there and nothing may be lost."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.exc import DBAPIError

from postledger.ledger import Ledger
from postledger.record.models import BatchRecord, BatchStatus, PostStatus
from tests.support.months import MONTH, posts_file
from tests.support.processes import child_env, spawn, stop
from tests.support.simulators import Sim, start_sim

pytestmark = pytest.mark.processes  # runs postledger in other processes
POSTS = 80  # four batches: 25, 25, 25, 5


@pytest.fixture
def slow_sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    yield from start_sim(monkeypatch, latency=300)


@pytest.fixture
def sim_holding_creates(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    """Charges each task at once but answers its create only after 300 s."""
    yield from start_sim(monkeypatch, latency=300, create_delay=300)


def run_and_kill(
    tmp_path: Path, sim: Sim, ledger_url: str, ready: Callable[[Ledger, Sim], bool]
) -> None:
    posts = posts_file(tmp_path / "posts.jsonl", POSTS, text="Is the sync broken again? Day {}.")
    env = child_env(POSTLEDGER_UPSTREAM_URL=sim.url, POSTLEDGER_DATABASE_URL=ledger_url)
    output = (tmp_path / "run.out").open("w+")
    process = spawn(
        [sys.executable, "-m", "cli", "run", "--month", MONTH, "--posts", str(posts)],
        cwd=tmp_path,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
    )
    db_file = tmp_path / "ledger.db"  # where the ledger_url fixture puts it
    watcher = None
    deadline = time.monotonic() + 240
    try:
        while True:
            assert process.poll() is None, (tmp_path / "run.out").read_text()
            assert time.monotonic() < deadline, "the run never reached the moment to kill it"
            if watcher is None and (db_file.exists() or not ledger_url.startswith("sqlite")):
                watcher = Ledger(ledger_url, read_only=True)
            try:
                if watcher is not None and ready(watcher, sim):
                    break
            except DBAPIError:
                pass  # the file is there, its tables not yet: look again

            time.sleep(0.2)
    finally:
        stop(process, first=signal.SIGKILL)  # the flow; its server stops by its lifeline
        output.close()
        if watcher is not None:
            watcher.close()


def running_batches(ledger: Ledger) -> list[BatchRecord]:
    return ledger.batches(MONTH, BatchStatus.RUNNING)


def assert_nothing_else_lost(ledger: Ledger, running: list[BatchRecord]) -> None:
    records = ledger.posts(MONTH)
    assert len(records) == POSTS
    in_flight = {pid for b in running for pid in b.post_ids}
    for record in records:
        if record.post_id in in_flight:
            assert (record.status, record.attempts) == (PostStatus.RUNNING, 1)
        else:
            assert (record.status, record.attempts) == (PostStatus.QUEUED, 0)
    # History and state agree for every post.
    last = {}
    for event in ledger.events(MONTH):
        last[event.entity_id] = event.to_status
    assert all(last[r.post_id] == r.status for r in records)
    assert {b.status for b in ledger.batches(MONTH)} == {BatchStatus.RUNNING, BatchStatus.QUEUED}


def test_killed_while_waiting_for_output(tmp_path: Path, slow_sim: Sim, ledger_url: str) -> None:
    run_and_kill(
        tmp_path,
        slow_sim,
        ledger_url,
        lambda ledger, _: sum(1 for b in running_batches(ledger) if b.upstream_task_id) == 2,
    )
    ledger = Ledger(ledger_url)
    running = running_batches(ledger)
    charges = slow_sim.charges()
    assert len(running) == 2 and len(charges) == 2
    # The ledger knows each paid task by its id: a later run can poll it instead of paying again.
    assert {(b.upstream_task_id, b.idempotency_key, tuple(b.post_ids)) for b in running} == {
        (c["task_id"], c["idempotency_key"], tuple(c["post_ids"])) for c in charges
    }
    assert_nothing_else_lost(ledger, running)


@pytest.mark.on_postgres  # a kill between the charge and its id
def test_killed_after_paying_before_the_task_id_came_back(
    tmp_path: Path, sim_holding_creates: Sim, ledger_url: str
) -> None:
    run_and_kill(
        tmp_path,
        sim_holding_creates,
        ledger_url,
        lambda ledger, sim: len(running_batches(ledger)) == 2 and len(sim.charges()) == 2,
    )
    ledger = Ledger(ledger_url)
    running = running_batches(ledger)
    charges = sim_holding_creates.charges()
    # R6: `running` means started locally; the upstream made (and charged) the tasks, but their
    # ids never arrived. The idempotency keys were saved before the calls, so the ledger can
    # still name the paid tasks, and an upstream that honours keys will not charge again.
    assert [b.upstream_task_id for b in running] == [None, None]
    assert {b.idempotency_key for b in running} == {c["idempotency_key"] for c in charges}
    assert_nothing_else_lost(ledger, running)
