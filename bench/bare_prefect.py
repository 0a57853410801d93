"""What Prefect alone costs per batch, in the shape the monthly flow gives each batch: one task
run under the `ai-batch` tag (limit 2), with two nested one-call task runs (a create and a
wait, each only sleeping L/2), on the private local server `postledger run` starts. No ledger,
no upstream, no simulator: the floor under the monthly flow's per-batch cost.

    uv run python bench/bare_prefect.py --batches 400 --latency 0.05

Reported: the batches' span (first start to last end), the CPU seconds of this process and of
its server child (the child's are read when it is reaped, after the server stops), and the time
before the first batch and after the last: Prefect's own start and stop.

    uv run python bench/bare_prefect.py --batches 12 --latency 1 --home /tmp/bare-home  # twice
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import resource
import sys
import time
from pathlib import Path
from typing import Any, cast

from workdir import isolated_workdir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--latency", type=float, default=0.05, help="each batch's sleep, in s")
    parser.add_argument(
        "--home", help="a Prefect home to reuse (migrated by the first run), as a user's is"
    )
    args = parser.parse_args()
    launched = time.time()
    isolated_workdir("postledger-bare-", **({"PREFECT_HOME": args.home} if args.home else {}))
    from flows.local_server import local_prefect_server

    with local_prefect_server():
        times = _run(args.batches, args.latency)
    stopped = time.time()
    first, last = min(start for start, _ in times), max(end for _, end in times)
    span = last - first
    own = resource.getrusage(resource.RUSAGE_SELF)
    server = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_cpu, server_cpu = own.ru_utime + own.ru_stime, server.ru_utime + server.ru_stime
    print(
        f"{args.batches} batches, L = {args.latency} s: span {span:.1f} s "
        f"({span / args.batches * 1000:.0f} ms a batch; ideal {args.batches * args.latency / 2:.1f}"
        " s)"
        f"; CPU: flow process {own_cpu:.1f} s, server {server_cpu:.1f} s (both with their start)"
    )
    print(
        f"from the start to the first batch {first - launched:.1f} s, from the last batch's end "
        f"to the server's stop {stopped - last:.1f} s, whole {stopped - launched:.1f} s"
    )
    return 0


def _run(batches: int, latency: float) -> list[tuple[float, float]]:
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.futures import PrefectFuture
    from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

    from flows.limits import ensure_tag_limit
    from postledger.defaults import MAX_IN_FLIGHT
    from tasks.batch import BATCH_TAG

    @task(name="create", cache_policy=NO_CACHE, persist_result=False)
    async def create(index: int) -> int:
        await asyncio.sleep(latency / 2)
        return index

    @task(name="wait", cache_policy=NO_CACHE, persist_result=False)
    async def wait(index: int) -> int:
        await asyncio.sleep(latency / 2)
        return index

    @task(name="process-batch", tags=[BATCH_TAG], cache_policy=NO_CACHE, persist_result=False)
    async def process_batch(index: int) -> tuple[float, float]:
        started = time.time()
        await create(index)
        await wait(index)
        return started, time.time()

    runner = cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=8))

    @flow(name="bare-month", task_runner=runner, persist_result=False)
    def month() -> list[tuple[float, float]]:
        # As the monthly flow does: a batch is submitted when a slot is free, never all at once.
        ended: queue.Queue[PrefectFuture[Any]] = queue.Queue()
        waiting, in_flight, times = list(range(batches)), 0, []
        while waiting or in_flight:
            while waiting and in_flight < MAX_IN_FLIGHT:
                future = process_batch.submit(waiting.pop(0))
                future.add_done_callback(lambda done: ended.put(done))
                in_flight += 1
            times.append(ended.get().result())
            in_flight -= 1
        return times

    ensure_tag_limit(MAX_IN_FLIGHT)
    return month()


if __name__ == "__main__":
    sys.exit(main())
