"""Not collected by the suite (no `test_` prefix): `tests/flow/test_clean_exit.py` runs it in a
pytest of its own and interrupts that pytest while these tests hold what tests hold.

Each test starts what tests start — this worker's local Prefect server, a simulator, a ledger
on PostgreSQL, a database like a Prefect server's, a child in a process group of its own that
no `finally` will stop, and one started as any test may start a child (plain Popen) — writes
down the processes and databases it holds, and waits to be interrupted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import databases, processes, simulators, waiting

PROOF = os.environ.get("POSTLEDGER_TEST_PROOF_DIR")
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]

pytestmark = pytest.mark.skipif(not PROOF, reason="run by tests/flow/test_clean_exit.py only")


def database_of(url: str) -> str | None:
    from sqlalchemy.engine import make_url

    return make_url(url).database if url.startswith("postgresql") else None


def test_holds_processes_and_databases_until_interrupted(
    prefect_harness: None, sim: simulators.Sim, ledger_url: str, pg_ledger_url: str
) -> None:
    assert PROOF is not None
    with databases.fresh_database("postledger_prefect") as server_database:
        processes.spawn(SLEEPER)  # registered, never stopped by the test
        subprocess.Popen(SLEEPER, start_new_session=True)  # known by its mark only
        mark = os.environ[processes.OWNER_VAR]

        # The sleepers may still be between fork and exec, when /proc cannot show their
        # environment yet: look again for a moment.
        def all_four() -> list[int]:  # the server, the simulator, two sleepers
            marked = processes._marked(lambda value: value == mark)
            return marked if len(marked) >= 4 else []

        found = waiting.wait_for("the server, the simulator and two sleepers", all_four, 20)
        held = {
            "mark": mark,
            "processes": [(pid, processes.started_at(pid)) for pid in found],
            "databases": [
                name
                for name in map(database_of, (ledger_url, pg_ledger_url, server_database))
                if name
            ],
        }
        (Path(PROOF) / "held.json.part").write_text(json.dumps(held))
        (Path(PROOF) / "held.json.part").rename(Path(PROOF) / "held.json")  # whole, or absent
        time.sleep(600)
