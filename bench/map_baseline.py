"""Prefect's own way to run B tagged tasks two at a time: `task.map` under the `ai-batch` tag
limit. Each task only sleeps L, so what it measures is the tag's slot hand-off, the baseline
the per-batch task runs of the monthly flow are compared with (bench/README.md)."""

from __future__ import annotations

import time
from typing import Any, cast

from prefect import flow, task
from prefect.futures import PrefectFuture
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner


@task(name="map-baseline", tags=["ai-batch"], persist_result=False)
def sleep_like_a_batch(index: int, latency: float) -> tuple[float, float]:
    started = time.time()
    time.sleep(latency)
    return started, time.time()


def measure_task_map(batches: int, latency: float) -> tuple[float, list[float]]:
    """The span from the first task's start to the last one's end, and every gap between a
    task's end and the next start that took its slot."""
    runner = cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=batches))

    @flow(name="map-baseline", task_runner=runner, persist_result=False)
    def mapped() -> list[tuple[float, float]]:
        futures = sleep_like_a_batch.map(range(batches), latency=latency)
        return [future.result() for future in futures]

    times = mapped()
    span = max(end for _, end in times) - min(start for start, _ in times)
    ends = sorted(end for _, end in times)
    gaps = []
    for start in sorted(start for start, _ in times)[2:]:
        freed = [end for end in ends if end <= start]
        if freed:
            gaps.append(start - freed[0])
            ends.remove(freed[0])
    return span, gaps
