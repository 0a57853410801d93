"""The simulated paid AI service: tasks, the charge log and request statistics.

Pure state behind a lock, with time passed in, so that the HTTP layer stays thin and fault
injection (`Faults`) can change what a request sees without touching the bookkeeping.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from simulator.model import count_tokens, write_output


class TaskState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass
class SimTask:
    task_id: str
    idempotency_key: str | None
    model: str
    prompt: str
    posts: list[tuple[str, str]]
    created: float  # monotonic seconds
    done_at: float
    output: str
    input_tokens: int
    output_tokens: int
    error: str | None = None
    # The item schema the request asked its answer in (`simulator.analyses`; None: the
    # default analysis): a repeat under the same key must ask the same, and output faults
    # spoil an answer in its shape.
    schema: dict[str, Any] | None = None

    def state(self, now: float) -> TaskState:
        if now >= self.done_at:
            return TaskState.FAILED if self.error else TaskState.SUCCEEDED
        # The first tenth of the latency is spent waiting for a worker, as real services do.
        queued_until = self.created + (self.done_at - self.created) / 10
        return TaskState.QUEUED if now < queued_until else TaskState.RUNNING


@dataclass(frozen=True)
class Charge:
    task_id: str
    idempotency_key: str | None
    post_ids: list[str]
    model: str
    input_tokens: int
    output_tokens: int
    at: str  # ISO 8601 UTC
    # When the task ends upstream: [at, done_at) is the time it is in flight; "" while held.
    done_at: str


async def until_done(task: SimTask) -> None:
    """Wait out a task's latency, and any hold on it (a synchronous answer waits for it)."""
    while task.done_at == math.inf:
        await asyncio.sleep(0.05)
    await asyncio.sleep(max(0.0, task.done_at - time.monotonic()))


class IdempotencyConflict(Exception):
    """The same Idempotency-Key arrived with a different request body."""


@dataclass
class Upstream:
    latency: float = 1.0
    seed: int = 0
    tasks: dict[str, SimTask] = field(default_factory=dict)
    by_key: dict[str, str] = field(default_factory=dict)
    charges: list[Charge] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)  # per task id: who was asked about
    max_in_flight: int = 0
    # False: every create makes (and charges) a new task, as upstreams without idempotency do.
    honour_keys: bool = True
    # True: no task ends until released (`POST /_sim/hold`): tests that need work in flight
    # at a given moment hold it there instead of hoping the latency is long enough.
    held: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._ids = random.Random(self.seed)

    def reset(self, *, latency: float, seed: int, honour_keys: bool) -> None:
        """Know nothing, as a simulator just started with these options (`POST /_sim/reset`)."""
        with self.lock:
            self.latency, self.seed, self.honour_keys = latency, seed, honour_keys
            self.tasks.clear()
            self.by_key.clear()
            self.charges.clear()
            self.requests.clear()
            self.polls.clear()
            self.max_in_flight = 0
            self.held = False
            self._ids = random.Random(seed)

    def count_request(self, route: str, task_id: str | None = None) -> None:
        with self.lock:
            self.requests[route] = self.requests.get(route, 0) + 1
            if task_id is not None:
                self.polls[task_id] = self.polls.get(task_id, 0) + 1

    def create(
        self,
        *,
        model: str,
        prompt: str,
        posts: list[tuple[str, str]],
        idempotency_key: str | None,
        now: float,
        on_new: Callable[[SimTask], None] | None = None,
        honour_key: bool = True,
        schema: dict[str, Any] | None = None,
    ) -> tuple[SimTask, bool]:
        """Accept a task; returns (task, charged). A known key returns its task, uncharged.
        `honour_key=False`: the protocol has no idempotency keys; the key (if any) is only
        written into the charge log. `schema`: the item schema its answer is asked in."""
        honour_key = honour_key and self.honour_keys
        with self.lock:
            if honour_key and idempotency_key in self.by_key:
                task = self.tasks[self.by_key[idempotency_key]]
                if (task.model, task.prompt, task.posts, task.schema) != (
                    model,
                    prompt,
                    posts,
                    schema,
                ):
                    raise IdempotencyConflict(idempotency_key)
                return task, False
            output = write_output(posts, schema)
            counted = count_tokens(prompt) + sum(count_tokens(t) for _, t in posts)
            tokens = (counted, count_tokens(output))
            task = self._new_task(
                idempotency_key, model, prompt, posts, now, output, tokens, schema
            )
            self._charge(task, [pid for pid, _ in posts], now, on_new, honour_key=honour_key)
            return task, True

    def create_counted(
        self,
        *,
        model: str,
        prompt: str,
        post_ids: list[str],
        input_tokens: int,
        output_tokens: int,
        idempotency_key: str | None,
        now: float,
        on_new: Callable[[SimTask], None] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> SimTask:
        """Accept a task whose posts and output the caller counted and keeps (an OpenAI batch
        keeps them on disk: a month's job is 500 000 posts); charged as `create` charges it,
        the task holds neither. The key (if any) is only written into the charge log."""
        with self.lock:
            tokens = (input_tokens, output_tokens)
            task = self._new_task(idempotency_key, model, prompt, [], now, "", tokens, schema)
            self._charge(task, post_ids, now, on_new, honour_key=False)
            return task

    def _new_task(
        self,
        key: str | None,
        model: str,
        prompt: str,
        posts: list[tuple[str, str]],
        now: float,
        output: str,
        tokens: tuple[int, int],
        schema: dict[str, Any] | None,
    ) -> SimTask:
        """A new task, its id the next of the seeded sequence (under the lock)."""
        task_id = "task_" + uuid.UUID(int=self._ids.getrandbits(128), version=4).hex
        done_at = math.inf if self.held else now + self.latency
        return SimTask(
            task_id, key, model, prompt, posts, now, done_at, output, *tokens, schema=schema
        )

    def _charge(
        self,
        task: SimTask,
        post_ids: list[str],
        now: float,
        on_new: Callable[[SimTask], None] | None,
        *,
        honour_key: bool,
    ) -> None:
        """Keep a new task and charge it (under the lock)."""
        wall = datetime.now(UTC)
        ends = "" if self.held else (wall + timedelta(seconds=self.latency)).isoformat()
        if on_new is not None:
            on_new(task)  # faults decided once per task, never again for a repeated key
        self.tasks[task.task_id] = task
        if task.idempotency_key is not None and honour_key:
            self.by_key[task.idempotency_key] = task.task_id
        self.charges.append(
            Charge(
                task_id=task.task_id,
                idempotency_key=task.idempotency_key,
                post_ids=post_ids,
                model=task.model,
                input_tokens=task.input_tokens,
                output_tokens=task.output_tokens,
                at=wall.isoformat(),
                done_at=ends,
            )
        )
        self.max_in_flight = max(self.max_in_flight, self._in_flight(now))

    def bill_only(self, task_id: str, post_ids: list[str]) -> None:
        """A task that ended before all its posts ran (an expired or cancelled batch): its
        charge covers only the posts that ran, as the providers bill; none ran, no charge."""
        with self.lock:
            task = self.tasks.get(task_id)
        if task is None:
            return
        wanted = set(post_ids)
        ran = [(pid, text) for pid, text in task.posts if pid in wanted]
        output = write_output(ran, task.schema) if ran else "[]"
        self.rebill(
            task_id,
            [pid for pid, _ in ran],
            count_tokens(task.prompt) + sum(count_tokens(t) for _, t in ran),
            count_tokens(output),
        )

    def rebill(
        self, task_id: str, post_ids: list[str], input_tokens: int, output_tokens: int
    ) -> None:
        """The task's charge covers only these posts, at these counts (`bill_only`'s, counted
        by a caller that keeps the posts itself); no post: the charge is taken back."""
        with self.lock:
            found = [i for i, c in enumerate(self.charges) if c.task_id == task_id]
            if task_id not in self.tasks or not found:
                return
            (index,) = found[-1:]
            if not post_ids:
                del self.charges[index]
                return
            self.charges[index] = replace(
                self.charges[index],
                post_ids=post_ids,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
            )

    def bill_usage(self, task_id: str, input_tokens: int, output_tokens: int) -> None:
        """The task's charge is the usage its answer reported (the OpenAI routes wrap the
        model's text, so the answer's tokens are not the raw output's)."""
        with self.lock:
            for index, charge in enumerate(self.charges):
                if charge.task_id == task_id:
                    self.charges[index] = replace(
                        charge, input_tokens=input_tokens, output_tokens=output_tokens
                    )

    def get(self, task_id: str) -> SimTask | None:
        with self.lock:
            return self.tasks.get(task_id)

    def forget(self, task_id: str) -> None:
        """Lose a task, as an upstream that expires or loses tasks does (its charge stays)."""
        with self.lock:
            task = self.tasks.pop(task_id, None)
            if task is not None and task.idempotency_key is not None:
                self.by_key.pop(task.idempotency_key, None)

    def hold(self, held: bool, now: float) -> None:
        """Hold every task from ending, or release them: each held task then ends one latency
        after the release, and its charge says so."""
        with self.lock:
            self.held = held
            if held:
                return
            wall = datetime.now(UTC) + timedelta(seconds=self.latency)
            released = {t.task_id for t in self.tasks.values() if t.done_at == math.inf}
            for task_id in released:
                self.tasks[task_id].done_at = now + self.latency
            self.charges = [
                replace(c, done_at=wall.isoformat()) if c.task_id in released else c
                for c in self.charges
            ]

    def in_flight(self, now: float) -> int:
        with self.lock:
            return self._in_flight(now)

    def _in_flight(self, now: float) -> int:
        return sum(1 for t in self.tasks.values() if t.created <= now < t.done_at)

    def stats(self, now: float) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": dict(self.requests),
                "polls_by_task": dict(self.polls),
                "tasks": len(self.tasks),
                "charges": len(self.charges),
                "in_flight": self._in_flight(now),
                "max_in_flight": self.max_in_flight,
            }
