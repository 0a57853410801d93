"""Fault injection for the simulator: deterministic by seed, set at start or at run time.

A rule says where (`on`), what (`fault`), and when: with probability `p`, or on the `nth`
requests of that kind (1-based, a script such as "the 3rd create fails"). Rules are tried in
order and the first that fires wins, one fault per request.

    create  reset | timeout | http_500 | http_502 | http_503 | http_504       (nothing is made)
            reset_after_create | timeout_after_create | http_500_after_create  (made, charged)
            rate_limit | auth | quota | quota_429 | permission               (refused, free)
    poll    reset | timeout | http_500 | http_502 | http_503 | http_504 | forget
    task    task_failed                                           (the task ends `failed`)
            expired | cancelled    (Batch API: the batch ends so, the later half of its requests
                                    undone (a batch of one request: none ran); task API: the
                                    task ends `failed`)
    output  not_json | wrong_shape | truncated | unknown_ids                  (whole output;
                                 Batch API: the whole answer of one request (line))
            missing_id | stray_id | bad_field | duplicate_id          (one item of the output)
            request_error       (Batch API: one request (line) of the batch fails with a 500;
                                 elsewhere: one post's item is missing)

The OpenAI routes meet the same rules: `create` is POST /v1/chat/completions and POST
/v1/batches, `poll` is GET /v1/batches/{id}; a chat completion's `task` fault is a 500 answer
(nothing charged). `rate_limit` also takes `retry_after=reset:N`: no Retry-After, only
OpenAI's `x-ratelimit-reset-requests: Ns`. POST /v1/messages (Anthropic) meets them too, in
Anthropic's words (`simulator.anthropic_api`: `http_503` is a 529 `overloaded_error`).

The compact form, for `--faults`: `on:fault@p` or `on:fault#n+m`, comma separated, options
after `;` — e.g. `create:http_503@0.05,create:rate_limit#2;retry_after=2,output:bad_field@0.1`.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Route(StrEnum):
    CREATE = "create"
    POLL = "poll"
    TASK = "task"
    OUTPUT = "output"


CREATE_BEFORE = {"reset", "timeout", "http_500", "http_502", "http_503", "http_504"}
CREATE_AFTER = {"reset_after_create", "timeout_after_create", "http_500_after_create"}
CREATE_REFUSED = {"rate_limit", "auth", "quota", "quota_429", "permission"}
POLL_FAULTS = {"reset", "timeout", "http_500", "http_502", "http_503", "http_504", "forget"}
TASK_FAULTS = {"task_failed", "expired", "cancelled"}
WHOLE_OUTPUT = {"not_json", "wrong_shape", "truncated", "unknown_ids"}
ONE_ITEM = {"missing_id", "stray_id", "bad_field", "duplicate_id", "request_error"}

KINDS: dict[Route, set[str]] = {
    Route.CREATE: CREATE_BEFORE | CREATE_AFTER | CREATE_REFUSED,
    Route.POLL: POLL_FAULTS,
    Route.TASK: TASK_FAULTS,
    Route.OUTPUT: WHOLE_OUTPUT | ONE_ITEM,
}


class FaultRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    on: Route
    fault: str
    p: float = Field(default=0.0, ge=0, le=1)
    nth: list[int] = Field(default_factory=list)
    # rate_limit: seconds ("2"), "date:N" (an HTTP-date N seconds ahead), "reset:N" (only
    # x-ratelimit-reset-requests), "missing", "garbage"
    retry_after: str = "1"
    hold: float = Field(default=60.0, ge=0, description="timeout: seconds the answer is held")

    @model_validator(mode="after")
    def _known(self) -> FaultRule:
        if self.fault not in KINDS[self.on]:
            raise ValueError(
                f"{self.on.value}:{self.fault} is not a fault; known for {self.on.value}: "
                + ", ".join(sorted(KINDS[self.on]))
            )
        if not self.nth and self.p == 0:
            raise ValueError(f"{self.on.value}:{self.fault} needs a probability p or nth")
        return self


class FaultPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = 0
    rules: list[FaultRule] = Field(default_factory=list)


def parse_compact(spec: str, seed: int = 0) -> FaultPlan:
    """`create:http_503@0.05,poll:forget#3;hold=2` -> FaultPlan (errors say what is wrong)."""
    rules: list[dict[str, Any]] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        head, *options = part.split(";")
        rule: dict[str, Any] = {}
        if "@" in head:
            head, probability = head.split("@", 1)
            rule["p"] = float(probability)
        if "#" in head:
            head, numbers = head.split("#", 1)
            rule["nth"] = [int(n) for n in numbers.split("+")]
        on, _, fault = head.partition(":")
        rule.update(on=on, fault=fault)
        for option in options:
            key, _, value = option.partition("=")
            rule[key] = value
        rules.append(rule)
    return FaultPlan.model_validate({"seed": seed, "rules": rules})


def load_plan(faults: str | None, scenario: Path | None, seed: int) -> FaultPlan:
    plan = FaultPlan(seed=seed)
    if scenario is not None:
        plan = FaultPlan.model_validate(json.loads(scenario.read_text(encoding="utf-8")))
    if faults:
        plan.rules.extend(parse_compact(faults, seed).rules)
    return plan


@dataclass(frozen=True)
class Decision:
    fault: str
    rule: FaultRule


class Faults:
    """Decides, request by request, which fault (if any) a request meets."""

    def __init__(self, plan: FaultPlan | None = None) -> None:
        self._lock = threading.Lock()
        self.replace(plan or FaultPlan())

    def replace(self, plan: FaultPlan) -> None:
        with self._lock:
            self.plan = plan
            self._counts = {route: 0 for route in Route}
            self._random = {route: random.Random(f"{plan.seed}:{route.value}") for route in Route}
            self.fired: list[dict[str, Any]] = []

    def decide(self, route: Route) -> Decision | None:
        with self._lock:
            self._counts[route] += 1
            n = self._counts[route]
            rules = [rule for rule in self.plan.rules if rule.on is route]
            # One draw per probabilistic rule and request, fired or not, so that one rule's
            # outcome never shifts another rule's random sequence.
            draws = [self._random[route].random() if rule.p else 1.0 for rule in rules]
            for rule, draw in zip(rules, draws, strict=True):
                if n in rule.nth or draw < rule.p:
                    self.fired.append({"on": route.value, "fault": rule.fault, "n": n})
                    return Decision(rule.fault, rule)
            return None

    def pick(self, route: Route, size: int) -> int:
        """A deterministic index for faults that touch one item of many."""
        with self._lock:
            return self._random[route].randrange(size)
