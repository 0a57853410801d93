"""Lanes: the `ai-batch` slots, each held by a task run that runs the flow's batches one after
another while the flow has the next one ready (R8).

Why lanes: handing a tag slot from one task run to the next costs a task-run start and two
Prefect API round trips (release, then acquire) — about 70 ms on two cores, 7 % of a one-second
batch (bench/README.md). A lane takes its slot once and keeps it only while the flow hands it
its next batch the moment the last one ends. When the flow has none (nothing runnable, a wait,
a pause, the end) it releases the lane at once, so a slot is never held idle and a paused run
holds none.

A new lane starts only after the lanes this flow released have ended: until a released lane's
task run has ended, Prefect still counts its slot, and a new lane asking for one then would be
answered 423 "retry after" the average time a slot is held, which for lanes is many seconds.

A batch runs inside its lane's task run, so the slot covers its whole life: create, wait,
validate, save. Its two HTTP calls are task runs of their own, named after it ("create
2026-10-b0004", "wait 2026-10-b0004"); its log lines are in the lane's log. The tag limit
stays the global ceiling across flow runs; the flow starts a lane only when its own window has
room (`flows/dispatch.py`).

The flow and its lanes share a process (the thread-pool task runner) and talk through
in-memory mailboxes, found by the pool's id.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture

from tasks.batch import BatchOutcome, process_batch

BATCH_TAG = "ai-batch"
# A lane that hears nothing from its flow for this long gives its slot back: the flow is gone.
ORPHANED_AFTER_SECONDS = 60.0
# How long closing waits for released lanes to give their slots back.
SETTLE_SECONDS = 30.0


@dataclass(frozen=True)
class Job:
    batch_id: str
    resume: bool  # sent by an interrupted run: poll its saved task id, send nothing (R23)


@dataclass(frozen=True)
class Ended:
    """A batch handed back by its lane: its outcome, or what broke it (R17)."""

    batch_id: str
    outcome: BatchOutcome | None = None
    error: BaseException | None = None


class LaneLost(RuntimeError):
    """The lane's task run ended without handing its batch back (see that task run's log)."""


class _Lane:
    def __init__(self, lane_id: str, job: Job) -> None:
        self.lane_id = lane_id
        self.job: Job | None = job  # the batch it runs now; None once handed back
        self.mailbox: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.future: PrefectFuture[Any] | None = None  # its task run
        self.released = False  # told to end: its slot goes back when its task run ends


_POOLS: dict[str, Lanes] = {}


class Lanes:
    """The flow's side: start batches on lanes, take their ends back, release idle lanes.

    A lane is idle once the flow has *taken* its last batch's end (`wait_ended`): only then
    has the flow had the chance to give it the next batch, so only then is it released."""

    def __init__(self, ledger_url: str, holder: str | None = None) -> None:
        self.pool_id = uuid.uuid4().hex
        self._ledger_url = ledger_url
        self.holder = holder  # the run's claim on its month, checked as each batch starts
        self._lock = threading.Lock()
        self._ended: queue.SimpleQueue[Ended] = queue.SimpleQueue()
        self._lanes: dict[str, _Lane] = {}  # alive: running a batch, or waiting for a word
        self._handed_back: dict[str, _Lane] = {}  # by batch id: ended, not yet taken
        self._idle: list[_Lane] = []  # their end was taken: waiting for the flow's word
        self._numbers = itertools.count(1)
        self._closed = False

    def __enter__(self) -> Lanes:
        _POOLS[self.pool_id] = self
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._lock:
            self._closed = True
        self.release_idle()
        if kind is None:
            self.settle()
        _POOLS.pop(self.pool_id, None)

    # The flow's side.

    def start(self, batch_id: str, *, resume: bool = False) -> None:
        """Run the batch on an idle lane, or on a new one (which takes an `ai-batch` slot)."""
        job = Job(batch_id, resume)
        with self._lock:
            if self._idle:
                lane = self._idle.pop()
                lane.job = job
                lane.mailbox.put(job)
                return
            leaving = [lane for lane in self._lanes.values() if lane.released]
        self._wait_until_ended(leaving)  # their slots are back: ours will not wait on them
        with self._lock:
            lane = _Lane(str(next(self._numbers)), job)
            self._lanes[lane.lane_id] = lane
        lane.future = run_lane.submit(self.pool_id, lane.lane_id, self._ledger_url)
        lane.future.add_done_callback(lambda _future: self._lane_gone(lane))

    def wait_ended(self, timeout: float) -> list[Ended]:
        """The batches that ended, waiting up to `timeout` seconds for the first."""
        try:
            ended = [self._ended.get(timeout=timeout)]
        except queue.Empty:
            return []
        while not self._ended.empty():
            ended.append(self._ended.get_nowait())
        with self._lock:
            for end in ended:
                if (lane := self._handed_back.pop(end.batch_id, None)) is not None:
                    self._idle.append(lane)
        return ended

    def release_idle(self) -> None:
        """Give the slots of lanes with no next batch back to Prefect."""
        with self._lock:
            idle, self._idle = self._idle, []
        for lane in idle:
            lane.released = True
            lane.mailbox.put(None)

    def settle(self) -> None:
        """Release idle lanes and wait until they have ended (called with no batch in flight),
        so that no slot is held while the flow waits for a person."""
        self.release_idle()
        with self._lock:
            alive = list(self._lanes.values())
        self._wait_until_ended(alive)

    @staticmethod
    def _wait_until_ended(lanes: list[_Lane]) -> None:
        for lane in lanes:
            if lane.future is not None:
                lane.future.wait(timeout=SETTLE_SECONDS)

    # The lane's side.

    def first_job(self, lane_id: str) -> Job | None:
        return self._lanes[lane_id].job

    def next_job(self, lane_id: str, ended: Ended) -> Job | None:
        """Hand a batch's end to the flow and wait for its word: the next batch, or none."""
        lane = self._lanes[lane_id]
        with self._lock:
            lane.job = None
            if self._closed:
                self._ended.put(ended)
                return None
            self._handed_back[ended.batch_id] = lane
            self._ended.put(ended)
        try:
            return lane.mailbox.get(timeout=ORPHANED_AFTER_SECONDS)
        except queue.Empty:
            with self._lock:
                if lane in self._idle or self._handed_back.get(ended.batch_id) is lane:
                    lane.released = True
                    self._idle = [idle for idle in self._idle if idle is not lane]
                    self._handed_back.pop(ended.batch_id, None)
                    return None
            return lane.mailbox.get()  # the flow gave it a batch just now

    def _lane_gone(self, lane: _Lane) -> None:
        with self._lock:
            self._lanes.pop(lane.lane_id, None)
            self._idle = [idle for idle in self._idle if idle is not lane]
            job, lane.job = lane.job, None
        if job is not None:  # it died holding a batch: the flow must not wait for it forever
            self._ended.put(
                Ended(job.batch_id, error=LaneLost(f"lane {lane.lane_id} ended mid-batch"))
            )


@task(
    name="batch-lane",
    task_run_name="ai-batch lane {lane_id}",
    tags=[BATCH_TAG],
    cache_policy=NO_CACHE,
    persist_result=False,
)
async def run_lane(pool_id: str, lane_id: str, ledger_url: str) -> int:
    """Hold one `ai-batch` slot and run the flow's batches in it, one after another, until the
    flow has no next batch ready. Returns how many it ran."""
    lanes = _POOLS[pool_id]
    job = lanes.first_job(lane_id)
    ran = 0
    while job is not None:
        try:
            outcome = await process_batch(
                job.batch_id, ledger_url, resume=job.resume, holder=lanes.holder
            )
            ended = Ended(job.batch_id, outcome=outcome)
        except Exception as exc:  # R17: one broken batch must not stop the others
            ended = Ended(job.batch_id, error=exc)
        ran += 1
        job = await asyncio.to_thread(lanes.next_job, lane_id, ended)
    return ran
