"""Chaos: a month run as `postledger run` processes, each killed with SIGKILL at a random
moment and restarted, until one finishes. Then the ledger and the simulator's charge log are
compared.

    uv run python bench/chaos.py --trials 3 --posts 500 --seed 1
    uv run python bench/chaos.py --trials 2 --no-idempotency   # an upstream without keys

Every restart says yes up front (`--poll --resubmit`): that is the person's confirmation. So:
- posts lost (not `completed` at the end) must be 0;
- unconfirmed double charges (an idempotency key charged more than once with no recorded
  confirmation of a resubmission of that batch) must be 0;
- extra charges caused by confirmed resubmissions are reported: 0 when the upstream honours
  idempotency keys, the price of the confirmations when it does not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from workdir import isolated_workdir

MONTH = "2026-10"


def posts_file(work: Path, n: int) -> Path:
    path = work / "posts.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"c{i:05d}", "text": f"Post {i}: payments fail at checkout."}) + "\n"
            for i in range(n)
        ),
        encoding="utf-8",
    )
    return path


def one_trial(n: int, rng: random.Random, latency: float, honour_keys: bool) -> dict[str, object]:
    import httpx

    from postledger.ledger import Ledger
    from postledger.record.models import PostStatus
    from simulator.child import simulator_process

    settings = {"POSTLEDGER_UPSTREAM_IDEMPOTENT": str(honour_keys).lower()}
    work = isolated_workdir("postledger-chaos-", **settings)
    posts = posts_file(work, n)
    runs = kills = 0
    started = time.monotonic()
    with simulator_process(
        latency=latency, seed=rng.randrange(1 << 30), honour_keys=honour_keys
    ) as url:
        env = {**os.environ, "POSTLEDGER_UPSTREAM_URL": url}
        command = [sys.executable, "-m", "postledger", "run", "--month", MONTH]
        command += ["--posts", str(posts), "--poll", "--resubmit"]
        while True:
            runs += 1
            process = subprocess.Popen(
                command,
                cwd=work,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            # Most kills land mid-month; some runs are let through to the end.
            try:
                code = process.wait(timeout=rng.uniform(3.0, 25.0))
            except subprocess.TimeoutExpired:
                code = None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the run and its local Prefect server
            if code is None:
                process.wait()
                kills += 1
                continue
            if code == 0:
                break
            if runs > 200:
                raise RuntimeError(f"no run finished after {runs} runs (last exit code {code})")
        charges = httpx.get(f"{url}/_sim/charges").json()["charges"]

    ledger = Ledger(os.environ["POSTLEDGER_DATABASE_URL"])
    lost = sum(p.status is not PostStatus.COMPLETED for p in ledger.posts(MONTH))
    per_key = Counter(c["idempotency_key"] for c in charges)
    confirmed = Counter(
        e.entity_id for e in ledger.events(MONTH) if "resubmission confirmed" in e.why
    )
    key_of = {b.idempotency_key: b.batch_id for b in ledger.batches(MONTH)}
    unconfirmed = extra = 0
    for key, count in per_key.items():
        batch_id = key_of.get(key)
        allowed = 1 + (confirmed[batch_id] if batch_id else 0)
        unconfirmed += max(0, count - allowed)
        extra += min(count, allowed) - 1
    ledger.close()
    return {
        "runs": runs,
        "kills": kills,
        "posts": n,
        "posts_lost": lost,
        "charges": len(charges),
        "unconfirmed_double_charges": unconfirmed,
        "extra_charges_confirmed": extra,
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--posts", type=int, default=500)
    parser.add_argument("--latency", type=float, default=1.0, help="simulator seconds per task")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-idempotency", action="store_true", help="upstream ignores keys")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    results = [
        one_trial(args.posts, rng, args.latency, honour_keys=not args.no_idempotency)
        for _ in range(args.trials)
    ]
    print(json.dumps(results, indent=2))
    bad = [r for r in results if r["posts_lost"] or r["unconfirmed_double_charges"]]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
