"""How fast `postledger run` gets going: the 300-post sample month, as a user runs it.

Each run is `postledger run --month 2026-10` in a fresh project folder (so every run has the
whole month to do), with one Prefect home for all of them: the first run on it migrates
Prefect's database, as a user's very first run does; the others reuse it, as every later run
of a user does. Reported per run: the time from launching the command to the first paid call
(the first batch's intent written to the ledger, just before its create), the whole run, and
the span of its batches (first start to last end, from the ledger).

    uv run python bench/startup.py --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from workdir import isolated_workdir

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "data" / "posts" / "2026-10.jsonl"
MONTH = "2026-10"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs after the first")
    parser.add_argument("--latency", type=float, default=1.0, help="the simulator's, in s")
    args = parser.parse_args()

    work = isolated_workdir("postledger-startup-")
    from postledger.ledger import open_ledger

    for run in range(args.repeat + 1):
        project = work / f"project-{run}"
        (project / "data" / "posts").mkdir(parents=True)
        shutil.copy(SAMPLE, project / "data" / "posts" / f"{MONTH}.jsonl")
        ledger_url = f"sqlite:///{project / 'ledger.db'}"
        launched = datetime.now(UTC)
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cli",
                "run",
                "--month",
                MONTH,
                "--latency",
                f"{args.latency:g}",
            ],
            cwd=project,
            env={**_environment(), "POSTLEDGER_DATABASE_URL": ledger_url},
            capture_output=True,
            text=True,
            check=False,
        )
        whole = time.monotonic() - started
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
            return 1
        ledger = open_ledger(ledger_url)
        batches = ledger.batches(MONTH)
        first = min(b.started_at for b in batches if b.started_at)
        last = max(b.finished_at for b in batches if b.finished_at)
        ledger.close()
        span = (last - first).total_seconds()
        label = "first run on a new Prefect home" if run == 0 else f"run {run}"
        print(
            f"{label:32s} first paid call {(first - launched).total_seconds():5.2f} s, "
            f"whole run {whole:5.2f} s, batches {span:5.2f} s ({whole / span:.2f}x)",
            flush=True,
        )
    return 0


def _environment() -> dict[str, str]:
    # The bundled simulator, as on a fresh machine: no upstream configured.
    return {k: v for k, v in os.environ.items() if not k.startswith("POSTLEDGER_UPSTREAM")}


if __name__ == "__main__":
    sys.exit(main())
