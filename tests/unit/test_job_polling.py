"""How often a running Batch API job is looked at (`postledger.trip.one_call.wait_for_job`): the
wait between two looks is a twentieth of the time the job has been followed, from the
settings' poll interval up to the upstream's longest. So a job is seen ended at most about a
twentieth of its time late, and a job followed through many short looks (each at most
`progress_every`, for its counts) is polled as one long look would poll it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from postledger.trip.one_call import wait_for_job
from postledger.upstreams.calls import JobEnded, JobLook, Running
from tests.support.trip_port import FakeClock

pytestmark = pytest.mark.unit


class Job:
    """A job that ends `ends_after` seconds after it is first looked at (never: None),
    counting the looks at it."""

    max_poll_interval: float | None = 30.0

    def __init__(self, clock: FakeClock, ends_after: float | None = None) -> None:
        self.clock, self.ends_after = clock, ends_after
        self.looks: list[float] = []

    async def look_job(self, job_id: str, batch_ids: Sequence[str]) -> JobLook:
        self.looks.append(self.clock.monotonic())
        if self.ends_after is not None and self.looks[-1] - self.looks[0] >= self.ends_after:
            return JobEnded(lines={})
        return Running()


def follow(job: Job, seconds: float, followed_for: float = 0.0) -> JobLook:
    """`wait_for_job` on the job, from the settings' default poll interval (0.5 s)."""
    return asyncio.run(
        wait_for_job(
            job,  # type: ignore[arg-type]
            "batch_1",
            ["b1"],
            seconds,
            clock=job.clock,
            poll_interval=0.5,
            followed_for=followed_for,
        )
    )


def looks_in_a_minute(followed_for: float = 0.0) -> int:
    job = Job(FakeClock())
    seen = follow(job, 60.0, followed_for)
    assert isinstance(seen, Running) and job.clock.slept == pytest.approx(60.0)
    return len(job.looks)


def test_a_new_job_is_looked_at_often_and_then_less() -> None:
    # Every 0.5 s for its first 10 s, then a twentieth of its age: 58 looks in its first
    # minute, each a small GET.
    assert looks_in_a_minute() == 58


def test_a_job_followed_for_long_is_looked_at_as_seldom_as_the_upstream_allows() -> None:
    # Ten minutes into a job, the next look waits the longest the upstream allows (30 s).
    assert looks_in_a_minute(followed_for=600.0) == 3
    # A minute in: 3 s, growing with the job.
    assert looks_in_a_minute(followed_for=60.0) == 16


@pytest.mark.parametrize("ends_after", [10.0, 60.0, 61.0, 300.0, 3_600.0])
def test_a_job_is_seen_ended_at_most_a_twentieth_of_its_time_late(ends_after: float) -> None:
    job = Job(FakeClock(), ends_after=ends_after)
    seen = follow(job, 86_400.0)
    assert isinstance(seen, JobEnded)
    late = (job.looks[-1] - job.looks[0]) - ends_after
    assert 0 <= late <= max(0.5, min(ends_after / 20 + 0.1, 30.0)), late
