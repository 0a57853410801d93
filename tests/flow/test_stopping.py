"""Ctrl-C in the terminal of a `postledger run` (SIGINT to its whole process group; SIGTERM,
as `timeout` sends, alike): the first starts no new batch and lets those in flight finish;
a second stops at once, leaving those in flight to the next run. Either way the run ends
within seconds, says what happened, and the next run finishes the month with no batch paid
twice. (Its local Prefect server, in a session of its own, is still there while the run
reports its end; with it stopped at the same moment the run spent a minute retrying it.)"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from postledger.ledger import Ledger
from postledger.record.models import BatchStatus, PostStatus
from tests.support.commands import Processes
from tests.support.months import MONTH, posts_file
from tests.support.processes import child_env, children_of, command_line
from tests.support.simulators import Sim, start_sim

pytestmark = pytest.mark.processes  # runs postledger in other processes
POSTS = 30  # ten batches of three


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    yield from start_sim(monkeypatch, latency=1.0)


class Run(Processes):
    """`postledger run` of the month against the simulator, as a terminal starts it."""

    def __init__(self, folder: Path, sim: Sim, ledger_url: str) -> None:
        env = child_env(
            POSTLEDGER_UPSTREAM_URL=sim.url,
            POSTLEDGER_DATABASE_URL=ledger_url,
            POSTLEDGER_MAX_BATCH_POSTS="3",
            COLUMNS="250",
        )
        super().__init__(folder, env)
        self.posts = posts_file(folder / "posts.jsonl", POSTS, text="Is sync broken, day {}?")
        self.ledger_url = ledger_url

    def month(self, name: str, *options: str) -> subprocess.Popen[bytes]:
        return self.start(name, "run", "--month", MONTH, "--posts", str(self.posts), *options)

    def flat(self, name: str) -> str:
        return " ".join(self.output(name).split())


def ended(process: subprocess.Popen[bytes], within: float) -> int:
    try:
        return process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run had not ended {within:g} s after the signal")


@pytest.fixture
def run(tmp_path: Path, sim: Sim, ledger_url: str) -> Iterator[Run]:
    runs = Run(tmp_path, sim, ledger_url)
    try:
        yield runs
    finally:  # Ctrl-C and failed asserts included
        runs.kill_all()


def batches_in(ledger: Ledger, status: BatchStatus) -> int:
    return len(ledger.batches(MONTH, status))


def assert_the_next_run_finishes_paying_each_batch_once(run: Run, sim: Sim, *options: str) -> None:
    code = ended(run.month("next", *options), within=240)
    assert code == 0, run.flat("next")
    ledger = Ledger(run.ledger_url, read_only=True)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    done = ledger.batches(MONTH, BatchStatus.COMPLETED)
    ledger.close()
    charged = Counter(charge["idempotency_key"] for charge in sim.charges())
    assert set(charged) == {batch.idempotency_key for batch in done}
    assert set(charged.values()) == {1}, charged  # no batch paid twice
    assert set(sim.charged_per_post().values()) == {1}


def two_batches_held_in_flight(run: Run, sim: Sim) -> subprocess.Popen[bytes]:
    """The run started, once both its slots hold a batch whose task id is saved; the simulator
    ends no task until released."""
    sim.hold(True)
    first = run.month("first")
    run.wait_for_ledger(
        "first",
        run.ledger_url,
        lambda ledger: (
            sum(1 for b in ledger.batches(MONTH, BatchStatus.RUNNING) if b.upstream_task_id) == 2
        ),
        what="two batches in flight with their task ids",
    )
    return first


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_lets_the_batches_in_flight_finish_and_the_next_run_goes_on(
    run: Run, sim: Sim, sig: signal.Signals
) -> None:
    first = run.month("first")
    run.wait_for_ledger(
        "first",
        run.ledger_url,
        lambda ledger: batches_in(ledger, BatchStatus.COMPLETED) >= 2,
        what="two batches completed",
    )
    os.killpg(first.pid, sig)  # as a terminal's Ctrl-C: the whole foreground group
    # The two in flight end one latency later; the run reports its end to its server.
    code = ended(first, within=30)
    out = run.flat("first")
    name = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert code == 1, out
    assert f"{name}: no new batch starts; those in flight are being finished" in out, out
    assert f"{name} asked it to stop. What is left waits for the next run of {MONTH}" in out
    assert "Traceback" not in out, out
    ledger = Ledger(run.ledger_url, read_only=True)
    assert batches_in(ledger, BatchStatus.RUNNING) == 0  # every batch sent was finished
    assert batches_in(ledger, BatchStatus.QUEUED) > 0  # and the month was not
    ledger.close()
    assert len(sim.charges()) < POSTS // 3
    assert_the_next_run_finishes_paying_each_batch_once(run, sim)


def test_a_second_ctrl_c_stops_at_once_and_the_next_run_polls_what_was_in_flight(
    run: Run, sim: Sim
) -> None:
    first = two_batches_held_in_flight(run, sim)
    os.killpg(first.pid, signal.SIGINT)
    time.sleep(0.5)
    os.killpg(first.pid, signal.SIGINT)
    assert ended(first, within=10) == 130, run.output("first")
    out = run.flat("first")
    assert "Ctrl-C again: stopping now. The batches in flight are left to the next run." in out
    ledger = Ledger(run.ledger_url, read_only=True)
    in_flight = ledger.batches(MONTH, BatchStatus.RUNNING)
    ledger.close()
    assert len(in_flight) == 2 and len(sim.charges()) == 2
    sim.hold(False)
    # Polling a known task is free; the run is told so up front.
    assert_the_next_run_finishes_paying_each_batch_once(run, sim, "--poll")


def test_a_run_whose_server_dies_ends_at_once_and_the_next_run_goes_on(run: Run, sim: Sim) -> None:
    """The local Prefect server killed under the run (as the OOM killer would): the run cannot
    go on nor report its end without it; it says so and ends, its batches in flight left to
    the next run."""
    first = two_batches_held_in_flight(run, sim)
    (server,) = [pid for pid in children_of(first.pid) if "local_server" in command_line(pid)]
    os.kill(server, signal.SIGKILL)
    assert ended(first, within=15) == 1, run.output("first")
    assert "Prefect's local server stopped unexpectedly (exit code -9)" in run.flat("first")
    sim.hold(False)
    assert_the_next_run_finishes_paying_each_batch_once(run, sim, "--poll")
