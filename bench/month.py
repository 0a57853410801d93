"""A whole month through `postledger run` on the embedded default, at several sizes: does the
bookkeeping's cost per batch stay flat as the month grows?

For each `--counts` size: a sample month of that many posts (`postledger sample`), then
`postledger run --latency L` on it in a fresh project folder (a migrated Prefect home shared by
all sizes, so no size pays the first-run migration). Reported: the whole run, the span of its
batches (first start to last end, from the ledger), every post ended, and the CPU seconds per
batch of the run's process tree (`postledger run`, its private Prefect server and its
simulator; read when the run is reaped) beyond what a one-batch month costs (the run's start
and end), beside the ideal span (batches x L / 2 slots).

    uv run python bench/month.py --counts 1000 100000 --latency 0.05

`--kind openai_batch` (or `anthropic_batch`) runs the month against the simulator's Batch API
face, where `--latency` is each upstream job's time: the table then also says how many upstream
jobs (submissions) the month took.

    uv run python bench/month.py --kind openai_batch --counts 100000 --latency 60
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from workdir import isolated_workdir

MONTH = "2026-10"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--baseline", type=int, default=25, help="posts of the one-batch month")
    parser.add_argument("--latency", type=float, default=0.05, help="the simulator's, in s")
    parser.add_argument("--kind", default="task_api", help="the upstream kind to run against")
    args = parser.parse_args()

    work = isolated_workdir("postledger-month-")
    from postledger.ledger import open_ledger

    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTLEDGER_UPSTREAM")}
    env["PREFECT_HOME"] = str(work / "prefect-home")
    env["POSTLEDGER_UPSTREAM_KIND"] = args.kind
    # Migrate the Prefect home once: every size below starts as a user's later run does.
    _run(["setup"], work, env)
    print(
        f"{'posts':>7s} {'batches':>7s} {'whole run':>10s} {'batches span':>13s} "
        f"{'ideal':>7s} {'CPU':>8s} {'CPU/batch':>10s} {'jobs':>5s}  ended"
    )
    fixed: float | None = None  # the CPU of a one-batch month: start, end, one batch
    for count in [args.baseline, *args.counts]:
        project = work / f"month-{count}"
        project.mkdir()
        posts = project / f"{MONTH}.jsonl"
        _run(["sample", "--month", MONTH, "--count", str(count), "--out", str(posts)], project, env)
        ledger_url = f"sqlite:///{project / 'ledger.db'}"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        _run(
            ["run", "--month", MONTH, "--posts", str(posts), "--latency", f"{args.latency:g}"],
            project,
            {**env, "POSTLEDGER_DATABASE_URL": ledger_url},
        )
        whole = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        ledger = open_ledger(ledger_url)
        batches = ledger.batches(MONTH)
        first = min(b.started_at for b in batches if b.started_at)
        last = max(b.finished_at for b in batches if b.finished_at)
        ended = Counter(p.status.value for p in ledger.posts(MONTH))
        jobs = len({b.submission_id or b.batch_id for b in batches})
        ledger.close()
        span = (last - first).total_seconds()
        # A Batch API job carries every due batch: the month is ideally one job's time.
        batch_api = args.kind in ("openai_batch", "anthropic_batch")
        ideal = args.latency if batch_api else len(batches) * args.latency / 2
        # Per batch: what the month cost beyond the one-batch month (the run's start and end).
        per_batch = "" if fixed is None else f"{1000 * (cpu - fixed) / (len(batches) - 1):8.1f}ms"
        fixed = cpu if fixed is None else fixed
        print(
            f"{count:7d} {len(batches):7d} {whole:9.1f}s {span:12.1f}s {ideal:6.1f}s "
            f"{cpu:7.1f}s {per_batch:>10s} {jobs:5d}  {dict(ended)}",
            flush=True,
        )
    return 0


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(
            f"postledger {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )


if __name__ == "__main__":
    sys.exit(main())
