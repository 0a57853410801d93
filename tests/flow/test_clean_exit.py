"""A Ctrl-C leaves nothing behind. A pytest of its own runs `interruptible.py`, whose tests
hold a local Prefect server, a simulator, children in and out of their own process groups and
PostgreSQL databases; once they hold them all, it is interrupted: once as a terminal's Ctrl-C
does (SIGINT to its whole process group, xdist off), once with SIGINT to the xdist controller
alone (its workers learn it from the controller). Then no process it started may be left, and
none of its databases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import databases, processes, repo

INNER = Path(__file__).with_name("interruptible.py")

pytestmark = pytest.mark.processes


def _as_in_a_terminal() -> None:
    """Ctrl-C's default action, as a shell gives the commands it starts. This pytest may have
    inherited SIGINT ignored (a `uv run`, or `&` in a script, start theirs so), and an inner
    pytest that inherited it too would never see the interruption this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("options", "whom"),
    [
        pytest.param(["-p", "no:xdist"], "group", id="ctrl-c-in-a-terminal"),
        pytest.param(["-n", "1"], "controller", id="sigint-to-the-xdist-controller"),
    ],
)
def test_an_interrupted_session_ends_every_process_and_drops_every_database(
    pg_server: str, tmp_path: Path, options: list[str], whom: str
) -> None:
    proof = tmp_path / "proof"
    proof.mkdir()
    env = {
        name: value
        for name, value in processes.child_env(POSTLEDGER_TEST_PROOF_DIR=str(proof)).items()
        if not name.startswith("PYTEST_")  # this session's xdist worker is not the inner one's
    }
    command = [sys.executable, "-m", "pytest", str(INNER), "-q", "-p", "no:cacheprovider"]
    command += ["-o", "addopts=", *options]
    out = tmp_path / "inner.out"
    with (
        out.open("w") as sink,
        processes.running(
            command,
            cwd=repo.REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=_as_in_a_terminal,
        ) as inner,
    ):
        deadline = time.monotonic() + 240
        while not (proof / "held.json").exists():
            assert inner.poll() is None, out.read_text()
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.2)
        held = json.loads((proof / "held.json").read_text())
        if whom == "group":
            os.killpg(inner.pid, signal.SIGINT)
        else:
            os.kill(inner.pid, signal.SIGINT)
        try:
            code = inner.wait(timeout=90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"not ended 90 s after the SIGINT:\n{out.read_text()}") from None
    said = out.read_text()
    assert code == pytest.ExitCode.INTERRUPTED, said

    run = held["mark"].split("/")[0]
    left = processes._marked(lambda mark: mark.startswith(f"{run}/"))
    assert left == [], f"still running: {left}\n{said}"
    alive = [pid for pid, started in held["processes"] if processes.started_at(pid) == started]
    assert held["processes"] and alive == [], said
    # A ledger and a server's database (the ledger on PostgreSQL too in its pass): all gone.
    assert len(held["databases"]) >= 2
    assert set(held["databases"]).isdisjoint(databases.ages_of_test_databases(pg_server)), said
