"""Two embedded `postledger run`s in one PREFECT_HOME: the second is refused, not let loose.

Each local Prefect server keeps its concurrency leases in memory while the `ai-batch` count
lives in the shared database: a second local server would take the first run's slots for
leaked ones, free them, and let four batches fly under a limit of two. Real processes, a
PREFECT_HOME shared by all of them, and one project folder, as from two terminals.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from postledger.ledger import Ledger
from postledger.record.models import BatchStatus, PostStatus
from tests.support.commands import Processes, migrated_prefect_home
from tests.support.months import posts_file
from tests.support.processes import child_env, children_of, is_alive

pytestmark = pytest.mark.processes  # runs postledger in other processes

FIRST, SECOND = "2026-10", "2026-11"


@pytest.fixture
def processes(
    tmp_path: Path, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Processes]:
    project = tmp_path / "project"
    project.mkdir()
    env = child_env(  # with the test's ledger (POSTLEDGER_DATABASE_URL)
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        # Shared by every run of this test; migrated once per test session, as after a first run.
        PREFECT_HOME=str(migrated_prefect_home(tmp_path / "prefect-home")),
        POSTLEDGER_MAX_BATCH_POSTS="3",
        POSTLEDGER_POLL_WAIT="0.5",
        COLUMNS="250",  # the refusal on as few lines as may be, to search it
    )
    started = Processes(project, env)
    try:
        yield started
    finally:  # Ctrl-C and failed asserts included
        started.kill_all()


def posts(folder: Path, month: str, count: int) -> str:
    path = folder / f"{month}.jsonl"
    return str(posts_file(path, count, ids=month + "-{:02d}", text="The app logs me out, case {}."))


# The local server's lock, its children's lifeline, the slots a killed run left.
def test_a_second_embedded_run_is_refused_and_a_killed_one_blocks_nothing(
    processes: Processes, ledger_url: str
) -> None:
    folder = processes.cwd
    # Run 1: its simulator holds every task for a minute, so both slots stay taken.
    first = processes.start(
        "first", "run", "--month", FIRST, "--posts", posts(folder, FIRST, 12), "--latency", "60"
    )
    processes.wait_for_ledger(
        "first",
        ledger_url,
        lambda ledger: len(ledger.batches(FIRST, BatchStatus.RUNNING)) >= 2,
        what="both slots taken",
    )

    second_posts = posts(folder, SECOND, 6)
    code, out = processes.run("second", "run", "--month", SECOND, "--posts", second_posts)
    assert code != 0, out
    flat = " ".join(out.split())  # the console wraps long lines
    assert f"process {first.pid}" in flat and "since 20" in flat, out  # who, since when
    assert "postledger run --month 2026-10" in flat, out
    assert "Wait for it to finish" in flat, out  # what to do
    assert "prefect server start" in flat and "PREFECT_API_URL" in flat, out
    assert "Traceback" not in out, out
    ledger = Ledger(ledger_url, read_only=True)
    assert ledger.posts(SECOND) == []  # refused before it touched the ledger
    assert len(ledger.batches(FIRST, BatchStatus.RUNNING)) >= 2  # run 1 goes on undisturbed
    ledger.close()
    assert first.poll() is None

    # `postledger setup` starts the same local server: the same refusal, not a traceback.
    code, out = processes.run("setup", "setup")
    flat = " ".join(out.split())
    assert code != 0 and f"process {first.pid}" in flat and "Traceback" not in out, out

    # Run 1 dies without any clean-up. Only its own process: its children (the local server,
    # the simulator) stop by themselves, and none of them keeps the lock.
    children = children_of(first.pid)
    assert len(children) == 2, children
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    deadline = time.monotonic() + 30
    while (alive := [pid for pid in children if is_alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive, f"run 1's children {alive} outlived it"
    code, out = processes.run(
        "third", "run", "--month", SECOND, "--posts", second_posts, "--latency", "0.2"
    )
    assert code == 0, out
    # It found run 1's two slots taken with no lease (the lease died with run 1's server's
    # memory, as far as this server knows) and freed them, and said so.
    assert "tag:ai-batch slot" in out, out
    ledger = Ledger(ledger_url, read_only=True)
    assert {p.status for p in ledger.posts(SECOND)} == {PostStatus.COMPLETED}
    ledger.close()
