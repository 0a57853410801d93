"""A whole month through `postledger run` on the embedded default, at several sizes: does the
bookkeeping's cost per batch stay flat as the month grows?

For each `--counts` size: a sample month of that many posts (`postledger sample`), then
`postledger run --latency L` on it in a fresh project folder (a migrated Prefect home shared by
all sizes, so no size pays the first-run migration). Reported: the whole run, the span of its
batches (first start to last end, from the ledger), every post ended, and the CPU seconds per
batch of the run's process tree (`postledger run`, its private Prefect server and its
simulator; read when the run is reaped) beyond what a one-batch month costs (the run's start
and end), beside the ideal span (batches x L / 2 slots), and the peak resident memory of each
process of the run (its VmHWM, sampled from /proc while it runs).

    uv run python bench/month.py --counts 1000 100000 --latency 0.05

`--kind openai_batch` (or `anthropic_batch`) runs the month against the simulator's Batch API
face, where `--latency` is each upstream job's time: the table then also says how many upstream
jobs (submissions) the month took.

    uv run python bench/month.py --kind openai_batch --counts 100000 --latency 60

`--ledger-url postgresql+psycopg://postgres@127.0.0.1:5432/bench_month` puts each size's
ledger on PostgreSQL (a database per size, made for the run and dropped after it).
"""

from __future__ import annotations

import argparse
import atexit
import os
import resource
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from scale import ledger_database
from sqlalchemy import text
from sqlalchemy.engine import make_url
from workdir import isolated_workdir

MONTH = "2026-10"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--baseline", type=int, default=25, help="posts of the one-batch month")
    parser.add_argument("--latency", type=float, default=0.05, help="the simulator's, in s")
    parser.add_argument("--kind", default="task_api", help="the upstream kind to run against")
    parser.add_argument("--ledger-url", help="PostgreSQL: a database per size, dropped after")
    args = parser.parse_args()

    work = isolated_workdir("postledger-month-")
    from postledger.ledger import open_ledger

    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTLEDGER_UPSTREAM")}
    env["PREFECT_HOME"] = str(work / "prefect-home")
    env["POSTLEDGER_UPSTREAM_KIND"] = args.kind
    if args.ledger_url:  # a shared ledger needs a spill location named (R46)
        env["POSTLEDGER_SPILL_PATH"] = str(work / "spill")
    # Migrate the Prefect home once: every size below starts as a user's later run does.
    _run(["setup"], work, env)
    print(
        f"{'posts':>7s} {'batches':>7s} {'whole run':>10s} {'batches span':>13s} "
        f"{'ideal':>7s} {'CPU':>8s} {'CPU/batch':>10s} {'jobs':>5s}  ended"
    )
    fixed: float | None = None  # the CPU of a one-batch month: start, end, one batch
    fixed_ours: float | None = None  # of it, the run's and its Prefect server's
    for count in [args.baseline, *args.counts]:
        project = work / f"month-{count}"
        project.mkdir()
        posts = project / f"{MONTH}.jsonl"
        _run(["sample", "--month", MONTH, "--count", str(count), "--out", str(posts)], project, env)
        ledger_url = _ledger_url(args.ledger_url, count, project)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        peaks = _run(
            ["run", "--month", MONTH, "--posts", str(posts), "--latency", f"{args.latency:g}"],
            project,
            {**env, "POSTLEDGER_DATABASE_URL": ledger_url},
        )
        whole = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        ledger = open_ledger(ledger_url)
        # Counted by the database: a month's records, loaded, would be this process's gigabytes.
        with ledger.engine.connect() as connection:
            first, last, n_batches, jobs = connection.execute(
                text(
                    "SELECT min(started_at), max(finished_at), count(*), "
                    "count(DISTINCT coalesce(submission_id, batch_id)) FROM batches "
                    "WHERE month = :m"
                ),
                {"m": MONTH},
            ).one()
            ended: dict[str, int] = dict(
                connection.execute(
                    text("SELECT status, count(*) FROM posts WHERE month = :m GROUP BY status"),
                    {"m": MONTH},
                ).all()
            )
        ledger.close()
        first, last = (datetime.fromisoformat(str(t)) for t in (first, last))
        batches = range(n_batches)
        span = (last - first).total_seconds()
        # A Batch API job carries every due batch: the month is ideally one job's time.
        batch_api = args.kind in ("openai_batch", "anthropic_batch")
        ideal = args.latency if batch_api else len(batches) * args.latency / 2
        # Per batch: what the month cost beyond the one-batch month (the run's start and end).
        per_batch = "" if fixed is None else f"{1000 * (cpu - fixed) / (len(batches) - 1):8.1f}ms"
        fixed = cpu if fixed is None else fixed
        print(
            f"{count:7d} {len(batches):7d} {whole:9.1f}s {span:12.1f}s {ideal:6.1f}s "
            f"{cpu:7.1f}s {per_batch:>10s} {jobs:5d}  {ended}",
            flush=True,
        )
        cpus = {name[4:]: peaks.pop(name) for name in list(peaks) if name.startswith("cpu ")}
        shown = ", ".join(f"{name} {mb:.0f} MB" for name, mb in sorted(peaks.items()))
        print(f"{'':7s} peak RSS per process: {shown}", flush=True)
        # Ours (the run and its Prefect server) apart from the simulator, which stands in for
        # the provider: CPU seconds, and beyond the one-batch month per batch.
        ours = cpus.get("run", 0.0) + cpus.get("prefect server", 0.0)
        beyond = ""
        if fixed_ours is not None:
            each = 1000 * (ours - fixed_ours) / (len(batches) - 1)
            beyond = f"; beyond the one-batch month {each:.1f} ms a batch"
        fixed_ours = ours if fixed_ours is None else fixed_ours
        said = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in sorted(cpus.items()))
        print(f"{'':7s} CPU per process: {said}; run + Prefect server {ours:.1f} s{beyond}")
    return 0


def _ledger_url(url: str | None, count: int, project: Path) -> str:
    """The ledger of one size: a SQLite file in its folder, or a PostgreSQL database named
    after `url`'s and the size, made now and dropped when this script ends."""
    if not url:
        return f"sqlite:///{project / 'ledger.db'}"
    parsed = make_url(url)
    sized = parsed.set(database=f"{parsed.database}_{count}").render_as_string(False)
    database = ledger_database(sized, project)
    atexit.register(database.__exit__, None, None, None)
    return database.__enter__()


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> dict[str, float]:
    """Run `postledger ARGS`; the peak RSS (MB) of each process of its tree, by name (and, under
    `cpu <name>`, its CPU seconds as last sampled, up to half a second before it ended)."""
    with subprocess.Popen(
        [sys.executable, "-m", "cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        peaks: dict[str, float] = {}
        watcher = threading.Thread(target=_watch, args=(process, peaks), daemon=True)
        watcher.start()
        stdout, stderr = process.communicate()
        watcher.join()
    if process.returncode != 0:
        sys.exit(f"postledger {' '.join(args)} failed:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return peaks


def _watch(process: subprocess.Popen[str], peaks: dict[str, float]) -> None:
    """Sample the peak RSS (VmHWM) of `process` and of every process under it until it ends."""
    while process.poll() is None:
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        tree = {process.pid}
        for _ in range(4):  # children, grandchildren, …
            tree |= {pid for pid, parent in parents.items() if parent in tree}
        for pid in tree:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            hwm = next((line for line in status.splitlines() if line.startswith("VmHWM")), "")
            if hwm:
                name = f"{_name(command)} ({pid})"
                peaks[name] = max(peaks.get(name, 0.0), int(hwm.split()[1]) / 1024)
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                used = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
                peaks[f"cpu {_name(command)}"] = max(peaks.get(f"cpu {_name(command)}", 0), used)
        time.sleep(0.5)


def _name(command: list[bytes]) -> str:
    """What a process of the run is, from its command line."""
    words = " ".join(part.decode(errors="replace") for part in command)
    named = ((" sim serve", "simulator"), ("uvicorn", "prefect server"), ("-m cli", "run"))
    for marker, name in named:
        if marker in words:
            return name
    return words[:40]


if __name__ == "__main__":
    sys.exit(main())
