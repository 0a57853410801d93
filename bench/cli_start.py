"""How fast the read commands answer: `postledger --help`, `status`, `breaker`, `plan`, each
started as a user starts it (a new process), on a ledger that holds a finished month.

The ledger is made first by `postledger run` of the 300-post sample month in a fresh folder
(or pass --folder to time an existing one). Reported per command: the median and the fastest
of --repeat starts.

    uv run python bench/cli_start.py --repeat 9
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "data" / "posts" / "2026-10.jsonl"
MONTH = "2026-10"
COMMANDS = (
    ("--help",),
    ("status", "--help"),
    ("status", "--month", MONTH),
    ("status", "--month", MONTH, "--json"),
    ("status", "--month", MONTH, "--failed"),
    ("breaker",),
    ("plan", "--month", MONTH),
    # Reads the whole month and writes its files (in the project folder's `report/`).
    ("report", "--month", MONTH, "--out", "report"),
)


def postledger(*args: str, cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    took = time.perf_counter() - started
    if done.returncode != 0:  # an error is fast, and no answer: not a time to report
        raise SystemExit(f"postledger {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--folder", type=Path, help="a project folder whose ledger to read")
    options = parser.parse_args()

    made = None if options.folder else Path(tempfile.mkdtemp(prefix="postledger-cli-start-"))
    folder = options.folder or made
    assert folder is not None
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_HOME": str(folder / "prefect-home"),
    }
    try:
        if made is not None:
            print(f"making the ledger: postledger run --month {MONTH} in {folder} …")
            postledger("run", "--month", MONTH, "--posts", str(SAMPLE), cwd=folder, env=env)
        print(f"{'command':42} {'median':>8} {'fastest':>8}")
        for args in COMMANDS:
            times = [postledger(*args, cwd=folder, env=env) for _ in range(options.repeat)]
            name = "postledger " + " ".join(args)
            print(f"{name:42} {statistics.median(times):7.2f}s {min(times):7.2f}s")
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


if __name__ == "__main__":
    main()
