"""Mixed faults: a month of N posts against a simulator injecting every fault class that
applies to the upstream's kind at a few percent (seeded), run through the real flow until every
post has ended; then, on the task API, the same fault plan against a naive client that resends
the whole batch on any error (it speaks only the task API).

    uv run python bench/faults.py --posts 1000 --seed 7 [--kind openai_batch]

Checks, for postledger: every post ends `completed` or `failed` with a kind; for every post its
business attempts in the ledger equal the charged upstream tasks containing it, a gateway's own
extra attempts aside (R42: possible charges of the batch, not attempts), plus its sends a Batch
API never ran and so never billed (they still count as attempts, R38); and no post-charge goes
beyond what the fired faults force (`bench/forced.py`). The exit status is 1 when any check
fails. With POSTLEDGER_BENCH_KEEP=1 the evidence (charge log, fired faults, the ledger's
batches) is kept as evidence.json beside the ledger.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from forced import LedgerBatch, account, unbilled_sends
from workdir import isolated_workdir

if TYPE_CHECKING:
    from postledger.ledger import Ledger

TASK_API, OPENAI_BATCH, ANTHROPIC_BATCH = "task_api", "openai_batch", "anthropic_batch"
EVERY_KIND = (TASK_API, OPENAI_BATCH, ANTHROPIC_BATCH)
BATCH_APIS = (OPENAI_BATCH, ANTHROPIC_BATCH)

# Each rule, with the kinds whose face of the simulator it fires on (the table in
# simulator/faults.py): a rule that never fires on a kind would only move the random draws.
# Order matters: the first rule of a route that fires wins.
PLAN: list[tuple[str, tuple[str, ...]]] = [
    ("create:http_503@0.03", EVERY_KIND),
    ("create:reset@0.02", EVERY_KIND),
    ("create:timeout_after_create@0.02;hold=2", EVERY_KIND),
    ("create:http_500_after_create@0.02", EVERY_KIND),
    ("create:rate_limit@0.03;retry_after=1", EVERY_KIND),
    ("create:auth@0.005", EVERY_KIND),
    ("create:gateway_retries@0.01", EVERY_KIND),
    # Reads: each spoils one answer, never the task; none is the upstream's verdict.
    ("poll:http_502@0.03", EVERY_KIND),
    ("poll:reset@0.02", EVERY_KIND),
    ("poll:timeout@0.02;hold=2", EVERY_KIND),  # held past POSTLEDGER_READ_TIMEOUT
    ("poll:http_503@0.02", EVERY_KIND),
    ("poll:rate_limit@0.01;retry_after=1", EVERY_KIND),
    ("poll:html@0.02", EVERY_KIND),
    ("poll:cut_json@0.02", EVERY_KIND),
    ("poll:wrong_shape@0.02", EVERY_KIND),
    ("poll:bad_status@0.02", EVERY_KIND),
    ("poll:foreign_results_url@0.02", (ANTHROPIC_BATCH,)),
    ("poll:forget@0.01", EVERY_KIND),  # the upstream's own verdict: it knows no such id
    ("results:http_502@0.03", BATCH_APIS),
    ("results:html@0.02", BATCH_APIS),
    ("results:cut_file@0.03", BATCH_APIS),
    ("results:missing_lines@0.03", BATCH_APIS),
    # The listings a lost job is looked for in: OpenAI's batches, Anthropic's Message Batches.
    ("list:http_502@0.03", (OPENAI_BATCH, ANTHROPIC_BATCH)),
    ("list:html@0.02", (OPENAI_BATCH, ANTHROPIC_BATCH)),
    ("list:cut_json@0.02", (OPENAI_BATCH, ANTHROPIC_BATCH)),
    ("task:task_failed@0.03", EVERY_KIND),
    ("task:expired@0.02", BATCH_APIS),  # on the task API the same as task_failed
    ("task:cancelled@0.02", BATCH_APIS),
    ("output:not_json@0.02", EVERY_KIND),
    ("output:truncated@0.02", EVERY_KIND),
    ("output:bad_field@0.04", EVERY_KIND),
    ("output:missing_id@0.02", EVERY_KIND),
    ("output:duplicate_id@0.02", EVERY_KIND),
    ("output:stray_id@0.02", EVERY_KIND),
    ("output:request_error@0.02", BATCH_APIS),  # OpenAI: a request line fails
]


def fault_plan(kind: str) -> str:
    """The plan for the simulator's `--faults`: the rules that fire on this kind."""
    return ",".join(rule for rule, kinds in PLAN if kind in kinds)


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


def run_postledger(
    work: Path, n: int, seed: int, latency: float, kind: str, job_lines: int
) -> dict[str, object]:
    import httpx

    from flows.monthly import RunStopped, monthly_posts
    from postledger.ledger import open_ledger
    from postledger.settings import UpstreamKind
    from postledger.upstreams import base_url_of
    from simulator.child import simulator_process

    month = "2030-01"
    path = posts_file(work, n)
    runs = stops = 0
    started = time.monotonic()
    with simulator_process(latency=latency, seed=seed, faults=fault_plan(kind)) as url:
        os.environ["POSTLEDGER_UPSTREAM_KIND"] = kind
        os.environ["POSTLEDGER_UPSTREAM_URL"] = base_url_of(UpstreamKind(kind), url)
        if kind in BATCH_APIS and job_lines:
            os.environ["POSTLEDGER_MAX_SUBMISSION_BATCHES"] = str(job_lines)
        ledger = open_ledger(os.environ["POSTLEDGER_DATABASE_URL"])
        while True:
            runs += 1
            try:
                # From the second run on, a person has said yes up front: poll the batches an
                # earlier run left uncertain, and resend the others under their same key (free
                # on the task API, which honours it; a Batch API may charge them again).
                answers: Answers = {"poll": True, "resubmit": True} if runs > 1 else {}
                monthly_posts(month=month, posts_path=str(path), **answers)
            except RunStopped:
                stops += 1  # a person would fix the key; here the next run simply goes on
            counts = ledger.counts(month)
            if sum(v for k, v in counts.items() if k.value not in ("completed", "failed")) == 0:
                break
        charges = httpx.get(f"{url}/_sim/charges").json()["charges"]
        fired = httpx.get(f"{url}/_sim/faults").json()["fired"]
    wall = time.monotonic() - started

    batches = [
        LedgerBatch(
            batch_id=b.batch_id,
            posts=[post_id for post_id, _ in b.request] if b.request else list(b.post_ids),
            upstream_id=b.upstream_task_id,
            raw_output=b.raw_output,
        )
        for b in ledger.batches(month)
    ]
    (work / "evidence.json").write_text(
        json.dumps(
            {"charges": charges, "fired": fired, "batches": [asdict(b) for b in batches]},
            indent=1,
        ),
        encoding="utf-8",
    )
    # The simulator honours idempotency keys (its default) and postledger is told so
    # (POSTLEDGER_UPSTREAM_IDEMPOTENT): on the task API a lost create answer forces nothing.
    accounting = account(kind, charges, fired, batches, keys_honoured=True)

    # A gateway's own extra attempts are charged but are no attempt of postledger's: it books
    # each retry the gateway reports as a possible charge of the batch instead (R42). A Batch
    # API's request that never ran is not billed, yet is an attempt (R38).
    extra = {task_id for entry in fired for task_id in entry.get("extra_charges", [])}
    charged = Counter(pid for c in charges for pid in c["post_ids"])
    attempted = Counter(pid for c in charges if c["task_id"] not in extra for pid in c["post_ids"])
    unbilled = unbilled_sends(kind, charges, fired, batches, jobs_of(ledger, month))
    attempted.update(unbilled)
    posts = ledger.posts(month)
    mismatched = [p for p in posts if p.attempts != attempted.get(p.post_id, 0)]
    unended = [p.post_id for p in posts if p.status.value not in ("completed", "failed")]
    kindless = [p.post_id for p in posts if p.status.value == "failed" and not p.failure_kind]
    completed = sum(1 for p in posts if p.status.value == "completed")
    return {
        "kind": kind,
        "runs": runs,
        "stopped_runs": stops,
        "completed": completed,
        "failed": dict(Counter(p.failure_kind.value for p in posts if p.failure_kind)),
        "charges": len(charges),
        "post_charges": sum(charged.values()),
        "post_charges_per_completed": round(sum(charged.values()) / max(completed, 1), 3),
        **accounting.summary(),
        "unbilled_attempts": sum(unbilled.values()),
        "attempts_differ_from_charges": len(mismatched),
        "attempts_differ_first": [
            {
                "post_id": p.post_id,
                "attempts": p.attempts,
                "charges": charged.get(p.post_id, 0),
                "unbilled": unbilled.get(p.post_id, 0),
            }
            for p in mismatched[:5]
        ],
        "not_ended": len(unended),
        "failed_without_kind": len(kindless),
        "wall_seconds": round(wall, 1),
        "faults_fired": dict(sorted(Counter(f"{f['on']}:{f['fault']}" for f in fired).items())),
    }


def jobs_of(ledger: Ledger, month: str) -> dict[str, list[str]]:
    """The month's upstream jobs on a Batch API: job id -> the ledger batches it carried."""
    from sqlmodel import Session, select

    from postledger.record.models import SubmissionRecord

    with Session(ledger.engine) as session:
        found = session.exec(select(SubmissionRecord).where(SubmissionRecord.month == month))
        return {s.upstream_job_id: s.batch_ids for s in found if s.upstream_job_id}


async def run_naive(n: int, seed: int, latency: float, max_sends: int = 10) -> dict[str, object]:
    """Resend the whole batch on any error, with no idempotency key; stop on nothing."""
    import httpx

    from postledger.analysis import load_analysis
    from postledger.batches.output import check_output
    from simulator.child import simulator_process

    analysis = load_analysis(None)  # the built-in analysis

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
                        if not isinstance(data, dict):
                            data = {}  # not the task: an error like any other, sent again
                            break
                        if data.get("status") in ("succeeded", "failed"):
                            break
                        await asyncio.sleep(latency / 4)
                    check = check_output(data.get("output") or "", batch, analysis)
                    if check.unusable is None and not check.invalid:
                        completed.update(batch)
                        return
                except (httpx.HTTPError, ValueError):
                    pass

    started = time.monotonic()
    with simulator_process(latency=latency, seed=seed, faults=fault_plan(TASK_API)) as url:
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
    parser.add_argument("--kind", choices=EVERY_KIND, default=TASK_API)
    parser.add_argument(
        "--job-lines",
        type=int,
        default=4,
        help="Batch APIs: the most ledger batches one upstream job carries (0: the provider's "
        "limit, the whole month in one job). A few, so that a month makes enough jobs for the "
        "faults decided once per job to meet some",
    )
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
        ours = run_postledger(work, args.posts, args.seed, args.latency, args.kind, args.job_lines)
    print("postledger:", json.dumps(ours), flush=True)
    if args.kind == TASK_API:
        naive = asyncio.run(run_naive(args.posts, args.seed, args.latency))
        print("naive     :", json.dumps(naive), flush=True)
    ok = (
        ours["attempts_differ_from_charges"] == 0
        and ours["not_ended"] == 0
        and ours["failed_without_kind"] == 0
    )
    print("invariants hold" if ok else "INVARIANT VIOLATED")
    beyond = ours["beyond_what_the_faults_force"]
    if beyond:
        print(f"BEYOND: {beyond} post-charges that no fired fault forces (listed in 'beyond')")
    else:
        print("no post-charge beyond what the faults force")
    return 0 if ok and not beyond else 1


if __name__ == "__main__":
    sys.exit(main())
