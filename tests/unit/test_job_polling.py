"""How often a running Batch API job is looked at (`postledger.trip.one_call.wait_for_job`): the
wait between two looks grows from where it is told to start up to the upstream's longest, so a
job followed through many short looks (each at most `progress_every`, for its counts) is polled
about as often as one long look would poll it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from postledger.trip.one_call import wait_for_job
from postledger.upstreams.calls import JobLook, Running
from tests.support.trip_port import FakeClock

pytestmark = pytest.mark.unit


class StillRunning:
    """A job that runs for ever, counting the looks at it."""

    max_poll_interval: float | None = 30.0

    def __init__(self) -> None:
        self.looks = 0

    async def look_job(self, job_id: str, batch_ids: Sequence[str]) -> JobLook:
        self.looks += 1
        return Running()


def looks_in_a_minute(poll_interval: float) -> int:
    job, clock = StillRunning(), FakeClock()
    seen = asyncio.run(
        wait_for_job(job, "batch_1", ["b1"], 60.0, clock=clock, poll_interval=poll_interval)  # type: ignore[arg-type]
    )
    assert isinstance(seen, Running) and clock.slept == pytest.approx(60.0)
    return job.looks


def test_a_new_job_is_looked_at_often_and_then_less() -> None:
    assert looks_in_a_minute(0.5) == 12  # 0.5 s, growing by half each time, up to 30 s


def test_a_job_followed_for_long_is_looked_at_as_seldom_as_the_upstream_allows() -> None:
    # Ten minutes into a job, a new look starts from 5 minutes: held to 30 s (the longest).
    assert looks_in_a_minute(300.0) == 3
    assert looks_in_a_minute(20.0) == 4  # 20 s, then 30 s, then what is left of the minute
