"""Throughput of the embedded default: B batches at simulator latency L.

Runs the real monthly flow (Prefect's local mode, a SQLite ledger, the simulator over loopback)
and compares the time from the first batch's start to the last batch's end, as the ledger
recorded them, with the ideal ceil(B / 2) · L of two batches always in flight. Then, against
the same Prefect server, Prefect's own way: `task.map` of B tasks under the same `ai-batch`
tag limit, each sleeping L (no ledger, no upstream: the tag's hand-off alone).

    uv run python bench/throughput.py --batches 40 --latency 1 --repeat 3

`--api-url` measures against a Prefect server of your own instead (e.g. `prefect server start`
on PostgreSQL, see bench/README.md); `--ledger-url` puts the ledger elsewhere than SQLite.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from contextlib import nullcontext
from datetime import datetime
from typing import Any

from workdir import isolated_workdir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=1, help="runs (months) to measure")
    parser.add_argument(
        "--server",
        choices=["local", "ephemeral"],
        default="local",
        help="local: the server `postledger run` starts (default); ephemeral: Prefect's own",
    )
    parser.add_argument("--api-url", help="a running Prefect server's API URL (overrides --server)")
    parser.add_argument("--ledger-url", help="the ledger's database URL (default: SQLite)")
    parser.add_argument(
        "--breakdown", action="store_true", help="print where each batch cycle's time went"
    )
    parser.add_argument(
        "--no-map", action="store_true", help="skip the comparison with Prefect's task.map"
    )
    args = parser.parse_args()

    extra = {"PREFECT_API_URL": args.api_url} if args.api_url else {}
    if args.ledger_url:
        extra["POSTLEDGER_DATABASE_URL"] = args.ledger_url
    work = isolated_workdir("postledger-bench-", **extra)
    from flows.local_server import local_prefect_server
    from postledger.ledger import open_ledger
    from simulator.child import simulator_process

    own_server = args.server == "local" and not args.api_url
    server = local_prefect_server() if own_server else nullcontext()
    ideal = math.ceil(args.batches / 2) * args.latency
    rows = []
    with server, simulator_process(latency=args.latency) as url:
        # Imported only now: Prefect reads its settings (PREFECT_API_URL) when first imported.
        from flows.monthly import monthly_posts

        os.environ["POSTLEDGER_UPSTREAM_URL"] = url
        for run in range(args.repeat):
            month = f"2030-{run + 1:02d}"
            path = work / f"{month}.jsonl"
            path.write_text(
                "".join(
                    json.dumps({"id": f"b{i:05d}", "text": f"Post number {i}: is it fast?"}) + "\n"
                    for i in range(args.batches * 25)
                ),
                encoding="utf-8",
            )
            started = time.monotonic()
            summary = monthly_posts(month=month, posts_path=str(path))
            total = time.monotonic() - started
            assert summary["counts"]["completed"] == args.batches * 25, summary
            batches = open_ledger(os.environ["POSTLEDGER_DATABASE_URL"]).batches(month)
            first = min(b.started_at for b in batches if b.started_at)
            last = max(b.finished_at for b in batches if b.finished_at)
            wall = (last - first).total_seconds()
            rows.append((wall, total))
            if args.breakdown:
                print_breakdown(open_ledger(os.environ["POSTLEDGER_DATABASE_URL"]), month, url)
            print(
                f"run {run + 1}: batches {wall:6.2f} s (ideal {ideal:.2f} s, utilization "
                f"{ideal / wall:6.1%}); whole flow incl. Prefect start-up {total:6.2f} s",
                flush=True,
            )
        median = statistics.median(w for w, _ in rows)
        print(
            f"median utilization over {len(rows)} runs: {ideal / median:.1%} "
            f"(B={args.batches}, L={args.latency:g} s)",
            flush=True,
        )
        if not args.no_map:
            from map_baseline import measure_task_map

            span, gaps = measure_task_map(args.batches, args.latency)
            print(
                f"task.map + ai-batch tag: span {span:6.2f} s (utilization {ideal / span:6.1%}); "
                f"end -> next start median {statistics.median(gaps) * 1000:6.1f} ms",
                flush=True,
            )
    return 0


def print_breakdown(ledger: Any, month: str, sim_url: str) -> None:
    """Median time of each step of a batch's cycle, from the ledger's events and the
    simulator's charge log: the evidence of where the time between two batches goes."""
    import httpx

    charges = {c["task_id"]: c for c in httpx.get(f"{sim_url}/_sim/charges").json()["charges"]}
    at: dict[str, dict[str, datetime]] = {}
    for event in ledger.events(month):
        if event.entity.value == "batch":
            at.setdefault(event.entity_id, {}).setdefault(event.to_status, event.at)
    steps: dict[str, list[float]] = {}

    def add(step: str, start: datetime | None, end: datetime | None) -> None:
        if start and end:
            steps.setdefault(step, []).append((end - start).total_seconds() * 1000)

    ends: list[datetime] = []
    for batch in sorted(ledger.batches(month), key=lambda b: b.started_at):
        charge = charges.get(batch.upstream_task_id or "")
        made = datetime.fromisoformat(charge["at"]) if charge else None
        done = datetime.fromisoformat(charge["done_at"]) if charge else None
        seen = at.get(batch.batch_id, {})
        add("running -> upstream task made", batch.started_at, made)
        add("upstream task done -> received", done, seen.get("received"))
        add("received -> completed", seen.get("received"), seen.get("completed"))
        # The slot this batch took was freed by the earliest end not yet taken by another start.
        freed = [e for e in ends if e <= batch.started_at]
        if freed:
            add("a batch completed -> the next running", min(freed), batch.started_at)
            ends.remove(min(freed))
        if batch.finished_at:
            ends.append(batch.finished_at)
    for step, values in steps.items():
        print(
            f"    {step:40s} median {statistics.median(values):6.1f} ms, "
            f"mean {statistics.mean(values):6.1f} ms, max {max(values):6.1f} ms (n={len(values)})"
        )


if __name__ == "__main__":
    sys.exit(main())
