"""Mixed faults: a month of N posts against a simulator injecting every fault class at a few
percent (seeded), run through the real flow until every post has ended; then the same fault
plan against a naive client that resends the whole batch on any error.

    uv run python bench/faults.py --posts 1000 --seed 7

Checks, for postledger: every post ends `completed` or `failed` with a kind, and for every post
the number of charged upstream tasks containing it equals its business attempts in the ledger.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TypedDict

from workdir import isolated_workdir

FAULTS = ",".join(
    [
        "create:http_503@0.03",
        "create:reset@0.02",
        "create:timeout_after_create@0.02;hold=2",
        "create:http_500_after_create@0.02",
        "create:rate_limit@0.03;retry_after=1",
        "create:auth@0.005",
        "poll:http_502@0.03",
        "poll:reset@0.02",
        "poll:forget@0.01",
        "task:task_failed@0.03",
        "output:not_json@0.02",
        "output:truncated@0.02",
        "output:bad_field@0.04",
        "output:missing_id@0.02",
        "output:duplicate_id@0.02",
        "output:stray_id@0.02",
    ]
)


class Answers(TypedDict, total=False):
    """What a person may have said up front: the monthly flow's `poll` and `resubmit`."""

    poll: bool
    resubmit: bool


def posts_file(work: Path, n: int) -> Path:
    path = work / "posts.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"m{i:05d}", "text": f"Post {i}: the app is slow again?"}) + "\n"
            for i in range(n)
        ),
        encoding="utf-8",
    )
    return path


def run_postledger(work: Path, n: int, seed: int, latency: float) -> dict[str, object]:
    import httpx

    from flows.monthly import RunStopped, monthly_posts
    from postledger.ledger import open_ledger
    from simulator.child import simulator_process

    month = "2030-01"
    path = posts_file(work, n)
    runs = stops = 0
    started = time.monotonic()
    with simulator_process(latency=latency, seed=seed, faults=FAULTS) as url:
        os.environ["POSTLEDGER_UPSTREAM_URL"] = url
        ledger = open_ledger(os.environ["POSTLEDGER_DATABASE_URL"])
        while True:
            runs += 1
            try:
                # From the second run on, a person has said yes up front: poll the batches an
                # earlier run left uncertain, and resend (same key: free here) the others.
                answers: Answers = {"poll": True, "resubmit": True} if runs > 1 else {}
                monthly_posts(month=month, posts_path=str(path), **answers)
            except RunStopped:
                stops += 1  # a person would fix the key; here the next run simply goes on
            counts = ledger.counts(month)
            if sum(v for k, v in counts.items() if k.value not in ("completed", "failed")) == 0:
                break
        charges = httpx.get(f"{url}/_sim/charges").json()["charges"]
        fired = Counter(f["fault"] for f in httpx.get(f"{url}/_sim/faults").json()["fired"])
    wall = time.monotonic() - started

    charged = Counter(pid for c in charges for pid in c["post_ids"])
    posts = ledger.posts(month)
    mismatched = [p.post_id for p in posts if p.attempts != charged.get(p.post_id, 0)]
    unended = [p.post_id for p in posts if p.status.value not in ("completed", "failed")]
    kindless = [p.post_id for p in posts if p.status.value == "failed" and not p.failure_kind]
    completed = sum(1 for p in posts if p.status.value == "completed")
    return {
        "runs": runs,
        "stopped_runs": stops,
        "completed": completed,
        "failed": dict(Counter(p.failure_kind.value for p in posts if p.failure_kind)),
        "charges": len(charges),
        "post_charges": sum(charged.values()),
        "post_charges_per_completed": round(sum(charged.values()) / max(completed, 1), 3),
        "attempts_differ_from_charges": len(mismatched),
        "not_ended": len(unended),
        "failed_without_kind": len(kindless),
        "wall_seconds": round(wall, 1),
        "faults_fired": dict(sorted(fired.items())),
    }


async def run_naive(n: int, seed: int, latency: float, max_sends: int = 10) -> dict[str, object]:
    """Resend the whole batch on any error, with no idempotency key; stop on nothing."""
    import httpx

    from postledger.batches.output import check_output
    from simulator.child import simulator_process

    ids = [f"m{i:05d}" for i in range(n)]
    batches = [ids[i : i + 25] for i in range(0, n, 25)]
    completed: set[str] = set()
    slots = asyncio.Semaphore(2)

    async def one(client: httpx.AsyncClient, batch: list[str]) -> None:
        async with slots:
            body = {
                "model": "sim-analyst-1",
                "prompt": "p",
                "posts": [
                    {"id": i, "text": f"Post {int(i[1:])}: the app is slow again?"} for i in batch
                ],
            }
            for _ in range(max_sends):
                try:
                    created = await client.post("/v1/tasks", json=body, timeout=1)
                    if created.status_code != 202:
                        await asyncio.sleep(0.2)
                        continue
                    task_id = created.json()["task_id"]
                    while True:
                        polled = await client.get(f"/v1/tasks/{task_id}", timeout=1)
                        if polled.status_code != 200:
                            data = {}
                            break
                        data = polled.json()
                        if data.get("status") in ("succeeded", "failed"):
                            break
                        await asyncio.sleep(latency / 4)
                    check = check_output(data.get("output") or "", batch)
                    if check.unusable is None and not check.invalid:
                        completed.update(batch)
                        return
                except (httpx.HTTPError, ValueError):
                    pass

    started = time.monotonic()
    with simulator_process(latency=latency, seed=seed, faults=FAULTS) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            await asyncio.gather(*(one(client, b) for b in batches))
            charges = (await client.get("/_sim/charges")).json()["charges"]
    post_charges = sum(len(c["post_ids"]) for c in charges)
    return {
        "completed": len(completed),
        "charges": len(charges),
        "post_charges": post_charges,
        "post_charges_per_completed": round(post_charges / max(len(completed), 1), 3),
        "wall_seconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()

    work = isolated_workdir(
        "postledger-faults-",
        PREFECT_LOGGING_LEVEL="CRITICAL",
        POSTLEDGER_REQUEST_BACKOFF="0.1",
        POSTLEDGER_READ_TIMEOUT="1",
        POSTLEDGER_POLL_WAIT="1",
        POSTLEDGER_RATE_LIMIT_WAIT="1",
        POSTLEDGER_UPSTREAM_IDEMPOTENT="true",  # the simulator honours idempotency keys
    )
    from flows.local_server import local_prefect_server

    with local_prefect_server():
        ours = run_postledger(work, args.posts, args.seed, args.latency)
    print("postledger:", json.dumps(ours), flush=True)
    naive = asyncio.run(run_naive(args.posts, args.seed, args.latency))
    print("naive     :", json.dumps(naive), flush=True)
    ok = (
        ours["attempts_differ_from_charges"] == 0
        and ours["not_ended"] == 0
        and ours["failed_without_kind"] == 0
    )
    print("invariants hold" if ok else "INVARIANT VIOLATED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
