"""A Batch API submission's bookkeeping alone, per ledger batch: marking its batches running,
writing it down, keeping its job id, and settling each line (output saved, checked, decided).

The real trip code (`mark_for_job`, `Ledger.record_submission`, `Ledger.record_job_id`, the
follower's `_settle_ended`) on a real ledger, with no Prefect, no HTTP and no simulator: the
job's lines are made here, every item valid. Reported: CPU milliseconds per ledger batch of
each step, of this process and, on PostgreSQL, of the server's processes (read from /proc: on
a shared server, others' work counts too).

    uv run python bench/bookkeeping.py --posts 20000
    uv run python bench/bookkeeping.py --posts 20000 \\
        --ledger-url postgresql+psycopg://postgres@127.0.0.1:5432/bench_bookkeeping
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from scale import ledger_database
from workdir import isolated_workdir

MONTH = "2026-10"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=20_000)
    parser.add_argument("--ledger-url", help="a PostgreSQL URL: created, used, dropped")
    args = parser.parse_args()
    work = isolated_workdir("postledger-bookkeeping-")
    with ledger_database(args.ledger_url, work) as url:
        steps = measure(url, args.posts)
    batches = steps.pop("batches")
    print(f"{args.posts} posts, {batches:.0f} batches, {url.split(':')[0]}; CPU ms per batch:")
    for step, (ours, server) in steps.items():
        print(f"  {step:<10s} {1000 * ours / batches:6.2f}   server {1000 * server / batches:6.2f}")
    return 0


def measure(url: str, count: int) -> dict[str, Any]:
    from postledger.analysis import load_analysis
    from postledger.batches.posts import Post
    from postledger.defaults import Price
    from postledger.ledger import Ledger
    from postledger.record.models import SubmissionRecord
    from postledger.settings import Settings, UpstreamKind
    from postledger.trip import Trip
    from postledger.trip.following import _settle_ended
    from postledger.trip.marking import mark_for_job
    from postledger.upstreams import facts_of
    from postledger.upstreams.calls import Delivered, JobEnded

    ledger = Ledger(url)
    text = "The app logs me out every time I switch to the camera and back, since the update. "
    posts = [Post(f"p{i:06d}", f"{text}{i}", i + 1) for i in range(count)]
    ledger.sync_posts(MONTH, posts, model="m", analysis=load_analysis(None))
    ledger.plan(MONTH, max_posts=25, max_chars=20_000)
    settings = Settings(
        upstream_kind=UpstreamKind.OPENAI_BATCH,
        upstream_url="http://127.0.0.1:9/v1",
        model="m",
        prices={"m": Price(input=150_000, output=600_000)},
    )

    class NoCalls:  # the trip's port: only its facts are read here
        facts = facts_of(settings)

    trip = Trip(ledger, settings, NoCalls(), logging.getLogger("bench"))  # type: ignore[arg-type]
    planned = {b.batch_id: b.post_ids for b in ledger.batches(MONTH)}
    ids = list(planned)
    clock = _Clock(url)
    marked: list[Any] = []
    while len(marked) < len(ids):
        more, stopped = mark_for_job(trip, ids[len(marked) :])
        assert stopped is None and more, stopped
        marked += more
    clock.lap("mark")
    submission = f"{MONTH}-s{uuid.uuid4().hex[:8]}"
    ledger.record_submission(
        SubmissionRecord(
            submission_id=submission,
            month=MONTH,
            idempotency_key=uuid.uuid4().hex,
            batch_ids=ids,
            metadata_sent={},
        )
    )
    ledger.record_job_id(submission, "batch_bench")
    clock.lap("write")
    usage = {"prompt_tokens": 900, "completion_tokens": 600}
    lines: dict[str, Any] = {
        batch.batch_id: Delivered(
            json.dumps([_item(pid) for pid in planned[batch.batch_id]]), usage
        )
        for batch in marked
    }
    outcomes: dict[str, Any] = {}
    _settle_ended(trip, {b.batch_id: b for b in marked}, JobEnded(lines), "batch_bench", outcomes)
    clock.lap("settle")
    ended = Counter(p.status.value for p in ledger.posts(MONTH))
    assert ended == {"completed": count}, ended
    ledger.close()
    return {**clock.laps, "total": clock.total(), "batches": len(ids)}


def _item(post_id: str) -> dict[str, str]:
    return {"id": post_id, "category": "complaint", "sentiment": "negative", "summary": "Logs out."}


class _Clock:
    """CPU seconds of this process, and of the PostgreSQL server's processes, per step."""

    def __init__(self, url: str) -> None:
        self._pg = url.startswith("postgresql")
        self.laps: dict[str, tuple[float, float]] = {}
        self._cpu, self._server = time.process_time(), self._postgres()

    def lap(self, step: str) -> None:
        cpu, server = time.process_time(), self._postgres()
        # Per server process: what it used since the last lap (a new one: all it used).
        used = sum(t - self._server.get(pid, 0.0) for pid, t in server.items())
        self.laps[step] = (cpu - self._cpu, used)
        self._cpu, self._server = cpu, server

    def total(self) -> tuple[float, float]:
        return (sum(a for a, _ in self.laps.values()), sum(b for _, b in self.laps.values()))

    def _postgres(self) -> dict[str, float]:
        """The CPU seconds of each process named postgres on this machine, by pid."""
        if not self._pg:
            return {}
        ticks = os.sysconf("SC_CLK_TCK")
        found = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                head, tail = stat.read_text().rsplit(")", 1)
                if head.endswith("(postgres"):
                    parts = tail.split()
                    found[stat.parent.name] = (int(parts[11]) + int(parts[12])) / ticks
            except (OSError, IndexError, ValueError):
                continue
        return found


if __name__ == "__main__":
    sys.exit(main())
