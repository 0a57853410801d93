"""The simulated paid AI service: tasks, the charge log, the prompt cache and request
statistics.

Pure state behind a lock, with time passed in, so that the HTTP layer stays thin and fault
injection (`Faults`) can change what a request sees without touching the bookkeeping. Each
charge is billed in money as it is made, and again whenever its usage is settled
(`simulator.billing`); a new task meets the prompt cache as it is made (`simulator.caching`).
"""

from __future__ import annotations

import math
import random
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from simulator.billing import Charge, Usage, billed, new_charge
from simulator.caching import CacheUse, Prefix, PromptCache, cache_use
from simulator.model import count_tokens, write_output
from simulator.task import SimTask

# A task is `simulator.task`'s; named here too, where it always was (tests import it so).
__all__ = ["IdempotencyConflict", "SimTask", "Upstream"]


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
    cache: PromptCache = field(default_factory=PromptCache)
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
            self.cache.clear()
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
        cache: Prefix | None = None,
        discount: int = 0,
    ) -> tuple[SimTask, bool]:
        """Accept a task; returns (task, charged). A known key returns its task, uncharged.
        `honour_key=False`: the protocol has no idempotency keys; the key (if any) is only
        written into the charge log. `schema`: the item schema its answer is asked in.
        `cache`: the prefix of its input the prompt cache may hold (a new task uses it);
        `discount`: the percent its face takes off its cost."""
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
            task.cached = cache_use(self.cache, model, cache, now)
            post_ids = [pid for pid, _ in posts]
            self._charge(task, post_ids, now, on_new, honour_key=honour_key, discount=discount)
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
        discount: int = 0,
    ) -> SimTask:
        """Accept a task whose posts and output the caller counted and keeps (an OpenAI batch
        keeps them on disk: a month's job is 500 000 posts); charged as `create` charges it,
        the task holds neither. The key (if any) is only written into the charge log. Its
        input meets no cache here: the caller's requests do, as it answers them
        (`use_cache`), and settle the charge then (`bill_usage`)."""
        with self.lock:
            tokens = (input_tokens, output_tokens)
            task = self._new_task(idempotency_key, model, prompt, [], now, "", tokens, schema)
            self._charge(task, post_ids, now, on_new, honour_key=False, discount=discount)
            return task

    def use_cache(self, model: str, prefix: Prefix | None, now: float) -> CacheUse:
        """What one request the caller answers itself (an OpenAI batch's line) reads from and
        writes to the prompt cache at `now`, the cache updated."""
        with self.lock:
            return cache_use(self.cache, model, prefix, now)

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
        discount: int,
    ) -> None:
        """Keep a new task and charge it (under the lock): its usage, at its face's price."""
        wall = datetime.now(UTC)
        ends = "" if self.held else (wall + timedelta(seconds=self.latency)).isoformat()
        if on_new is not None:
            on_new(task)  # faults decided once per task, never again for a repeated key
        self.tasks[task.task_id] = task
        if task.idempotency_key is not None and honour_key:
            self.by_key[task.idempotency_key] = task.task_id
        self.charges.append(
            new_charge(
                task.task_id,
                task.idempotency_key,
                post_ids,
                task.model,
                task.usage(),
                discount,
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
        by a caller that keeps the posts itself); no post: the charge is taken back (and its
        cost with it). The input is counted whole, none of it cached: billed as one request
        of that input at the full rate."""
        with self.lock:
            found = [i for i, c in enumerate(self.charges) if c.task_id == task_id]
            if task_id not in self.tasks or not found:
                return
            (index,) = found[-1:]
            if not post_ids:
                del self.charges[index]
                return
            charge = replace(self.charges[index], post_ids=post_ids)
            self.charges[index] = billed(charge, Usage(input_tokens, output_tokens))

    def bill_usage(self, task_id: str, usage: Usage, cost: int | None = None) -> None:
        """The task's charge is the usage its answer reported (the OpenAI routes wrap the
        model's text, so the answer's tokens are not the raw output's); `cost`: what its
        answers cost, each rounded on its own (an OpenAI batch's lines), else the usage's
        as one request."""
        with self.lock:
            for index, charge in enumerate(self.charges):
                if charge.task_id == task_id:
                    self.charges[index] = billed(charge, usage, cost)

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
