"""Fault injection for the simulator: deterministic by seed, set at start or at run time.

A rule says where (`on`), what (`fault`), and when: with probability `p`, or on the `nth`
requests of that kind (1-based, a script such as "the 3rd create fails"). Rules are tried in
order and the first that fires wins, one fault per request. `per_id=true` (reads only:
`poll`, `results`, `list`) makes `nth` count the route's requests for the same upstream id
(task, batch or file id; `list`: its cursor, OpenAI's `after`, Anthropic's `after_id` else
`before_id`): `poll:html#1;per_id=true` is "the first poll of each upstream id gets an HTML
page".

    create  reset | timeout | http_500 | http_502 | http_503 | http_504       (nothing is made)
            reset_after_create | timeout_after_create | http_500_after_create  (made, charged)
            rate_limit | auth | quota | quota_429 | permission               (refused, free)
            gateway_retries    (a gateway in front retried on its own: the work made, and
                                charged, `retries` extra times, then the true answer)
            gateway_retries_then_500   (the same extra attempts, then a 500: nothing more made)
    poll    reset | timeout | http_500 | http_502 | http_503 | http_504 | forget
            rate_limit | auth | quota | quota_429 | permission   (the read refused, as a create
                                                                  is; the task goes on)
            html           (a 200 text/html captive-portal page instead of the JSON)
            cut_json       (a 200 JSON answer cut in half: a complete response, a broken body)
            wrong_shape    (a 200 valid JSON answer that is not the object asked for: a list on
                            odd-numbered requests, an object of none of its fields on even ones)
            bad_status     (the true answer, its `status` / `processing_status` "paused")
            foreign_results_url  (Anthropic Message Batches: an ended batch's `results_url`
                            names api.anthropic.com; the results stay at the simulator's path)
    results reset | timeout | http_500 | http_502 | http_503 | http_504 | html
            cut_file       (a 200 JSONL answer, the first half of its bytes: cut mid-line)
            missing_lines  (a 200 JSONL answer with one line left out, picked by seed)
    list    reset | timeout | http_500 | http_502 | http_503 | http_504 | html | cut_json
    task    task_failed                                           (the task ends `failed`)
            expired | cancelled    (Batch API: the batch ends so, the later half of its requests
                                    undone (a batch of one request: none ran); task API: the
                                    task ends `failed`)
    output  not_json | wrong_shape | truncated | unknown_ids                  (whole output;
                                 Batch API: the whole answer of one request (line))
            missing_id | stray_id | bad_field | duplicate_id |        (one item of the output)
            missing_field | long_string
            request_error       (Batch API: one request (line) of the batch fails with a 500;
                                 elsewhere: one post's item is missing)

Output faults spoil in the shape of the analysis asked (`simulator.item_spoils`): `bad_field`
an enum value outside its values (default analysis: `"sentiment": "ecstatic"`),
`missing_field` the item's first field left out, `long_string` its first text field one
character past its bound (no text field: as `bad_field`).

The OpenAI routes meet the same rules: `create` is POST /v1/chat/completions and POST
/v1/batches, `poll` is GET /v1/batches/{id}, `results` GET /v1/files/{id}/content, `list`
GET /v1/batches; a chat completion's `task` fault is a 500 answer (nothing charged).
`rate_limit` also takes `retry_after=reset:N`: no Retry-After, only OpenAI's
`x-ratelimit-reset-requests: Ns`. POST /v1/messages (Anthropic) meets them too, in
Anthropic's words (`simulator.anthropic_api`: `http_503` is a 529 `overloaded_error`); its
Message Batches' `poll` is GET /v1/messages/batches/{id}, `results` GET
/v1/messages/batches/{id}/results, `list` GET /v1/messages/batches (`http_503` a 529 there
too). The task API's `poll` is GET /v1/tasks/{id}. How a read answer is spoiled:
`simulator.read_faults`. A read fault spoils one answer, never the task: the next read
without a fault gives the true answer.

The gateway faults play a gateway (the LiteLLM proxy) in front of the simulator that sent the
create `retries` extra times (option `retries`, 1 to 10, default 2) before the attempt whose
answer it passes on with `x-litellm-attempted-retries: <retries>` (`simulator.gateway`). Each
extra attempt makes and charges the work as that create does: a task (a repeat under a known
Idempotency-Key is not charged again while keys are honoured), a completion or a message whose
answer is dropped, an OpenAI batch of the same input file and metadata (listed by GET
/v1/batches), a Message Batch (listed by GET /v1/messages/batches). The extra attempts meet
no `task` or `output` fault and draw nothing for them: their answers are never read, and
every rule's counts and random sequence stay those of the requests' own attempts (a task
made under an honoured Idempotency-Key is the request's own, whichever attempt made it: it
meets its faults once). A create meets one fault: the request's own attempt meets none
(`gateway_retries`) or is a 500 in the protocol's words (`gateway_retries_then_500`).

`GET /_sim/faults` lists what fired (`fired`): each entry's route (`on`), `fault`, `n` (the
route's count of requests), and what it hit where known: `id`, the upstream id read (poll,
results; list: its cursor) or, for `task` and `output`, the task id of the charge log
(`GET /_sim/charges`); `batch_id` for a file or a request of a batch; `custom_id` for one
request (line) of a batch, or the results line `missing_lines` left out; `post_id` for one
item of an output. A request of an Anthropic batch that a `task` fault kept from running has
no charge, so no `id`. A gateway fault names the charges its extra attempts made beyond the
one the request's answer stands for: `extra_charges` (task ids of the charge log; none for a
task API create under an honoured Idempotency-Key, whose one charge is the key's) and, for
batches, `extra_batches` (the upstream batch ids). A create fault that makes the work and
loses its answer (`reset_after_create`, `timeout_after_create`, `http_500_after_create`) names
what it made: `made`, the task ids of the charges it made in the charge log (the task API's
task; the completion or the message; an OpenAI batch's one charge; a Message Batch's charge
per request that runs), and, for a batch, `batch_id` (the upstream batch id). `made` is empty
when the create made no charge: a task API create under a key already honoured (the key's
charge is its first create's) or used with another request (the 422 answered), a completion or
message whose `task` fault answered 500 first, an OpenAI batch whose input lines fail
validation (answered `failed` as without the fault).
A charge the upstream takes back later (an OpenAI batch that fails, a Message Batch request
cancelled before it ran) leaves the charge log; `made` still names it. `n_of_id`: the count a
`per_id` rule fired on. `applied: false`: the fault fired where it changes nothing (a
`foreign_results_url` where there is no ended Anthropic batch, a `cut_json`, `wrong_shape`
or `bad_status` on an error answer, a create fault after which nothing was made: the cases
of `made` empty but the first): the answer is the true one.

The compact form, for `--faults`: `on:fault@p` or `on:fault#n+m`, comma separated, options
after `;` — e.g. `create:http_503@0.05,create:rate_limit#2;retry_after=2,output:bad_field@0.1`
or `poll:html#1;per_id=true,results:missing_lines@0.2` or
`create:gateway_retries#1;retries=3,create:gateway_retries_then_500@0.05`.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Route(StrEnum):
    CREATE = "create"
    POLL = "poll"
    RESULTS = "results"
    LIST = "list"
    TASK = "task"
    OUTPUT = "output"


# The routes that read what the upstream holds: the ones `per_id` counts by upstream id.
READS = {Route.POLL, Route.RESULTS, Route.LIST}

TRANSPORT = {"reset", "timeout", "http_500", "http_502", "http_503", "http_504"}
CREATE_BEFORE = TRANSPORT
CREATE_AFTER = {"reset_after_create", "timeout_after_create", "http_500_after_create"}
CREATE_REFUSED = {"rate_limit", "auth", "quota", "quota_429", "permission"}
CREATE_GATEWAY = {"gateway_retries", "gateway_retries_then_500"}
# More extra attempts than a gateway is ever set to make: a typo must not make a thousand
# charged batches.
MAX_GATEWAY_RETRIES = 10
# A read refused (the key, the balance, a permission, a rate limit): it says nothing of the task.
READ_REFUSED = CREATE_REFUSED
POLL_FAULTS = (
    TRANSPORT
    | READ_REFUSED
    | {
        "forget",
        "html",
        "cut_json",
        "wrong_shape",
        "bad_status",
        "foreign_results_url",
    }
)
RESULTS_FAULTS = TRANSPORT | {"html", "cut_file", "missing_lines"}
LIST_FAULTS = TRANSPORT | {"html", "cut_json"}
TASK_FAULTS = {"task_failed", "expired", "cancelled"}
WHOLE_OUTPUT = {"not_json", "wrong_shape", "truncated", "unknown_ids"}
ONE_ITEM = {"missing_id", "stray_id", "bad_field", "duplicate_id", "request_error"}
ONE_ITEM |= {"missing_field", "long_string"}

KINDS: dict[Route, set[str]] = {
    Route.CREATE: CREATE_BEFORE | CREATE_AFTER | CREATE_REFUSED | CREATE_GATEWAY,
    Route.POLL: POLL_FAULTS,
    Route.RESULTS: RESULTS_FAULTS,
    Route.LIST: LIST_FAULTS,
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
    per_id: bool = Field(
        default=False, description="reads: `nth` counts the requests for each upstream id"
    )
    retries: int = Field(
        default=2,
        ge=1,
        le=MAX_GATEWAY_RETRIES,
        description="gateway faults: the extra attempts the gateway made",
    )

    @model_validator(mode="after")
    def _known(self) -> FaultRule:
        if self.fault not in KINDS[self.on]:
            raise ValueError(
                f"{self.on.value}:{self.fault} is not a fault; known for {self.on.value}: "
                + ", ".join(sorted(KINDS[self.on]))
            )
        if not self.nth and self.p == 0:
            raise ValueError(f"{self.on.value}:{self.fault} needs a probability p or nth")
        if self.per_id and self.on not in READS:
            raise ValueError(
                f"{self.on.value}:{self.fault}: per_id counts the reads of each upstream id; "
                "it is for " + ", ".join(sorted(route.value for route in READS)) + " only"
            )
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
    # Its entry in `Faults.fired`: what it hit is added there once known (`Faults.note`).
    entry: dict[str, Any] = field(default_factory=dict)


class Faults:
    """Decides, request by request, which fault (if any) a request meets."""

    def __init__(self, plan: FaultPlan | None = None) -> None:
        self._lock = threading.Lock()
        self.replace(plan or FaultPlan())

    def replace(self, plan: FaultPlan) -> None:
        with self._lock:
            self.plan = plan
            self._counts = {route: 0 for route in Route}
            self._counts_of_id: dict[tuple[Route, str | None], int] = {}
            self._random = {route: random.Random(f"{plan.seed}:{route.value}") for route in Route}
            self.fired: list[dict[str, Any]] = []

    def decide(
        self, route: Route, upstream_id: str | None = None, **hit: str | None
    ) -> Decision | None:
        """The fault this request meets, if any. `upstream_id`: the id it reads (or, for
        `task` and `output`, the task it makes); `hit`: more of what a fault would hit
        (`batch_id`, `custom_id`), written with it into `fired`."""
        with self._lock:
            self._counts[route] += 1
            n = self._counts[route]
            key = (route, upstream_id)
            self._counts_of_id[key] = n_of_id = self._counts_of_id.get(key, 0) + 1
            rules = [rule for rule in self.plan.rules if rule.on is route]
            # One draw per probabilistic rule and request, fired or not, so that one rule's
            # outcome never shifts another rule's random sequence.
            draws = [self._random[route].random() if rule.p else 1.0 for rule in rules]
            for rule, draw in zip(rules, draws, strict=True):
                if (n_of_id if rule.per_id else n) in rule.nth or draw < rule.p:
                    entry: dict[str, Any] = {"on": route.value, "fault": rule.fault, "n": n}
                    if rule.per_id:
                        entry["n_of_id"] = n_of_id
                    known = {"id": upstream_id, **hit}
                    entry.update({name: value for name, value in known.items() if value})
                    self.fired.append(entry)
                    return Decision(rule.fault, rule, entry)
            return None

    def note(self, decision: Decision, **facts: Any) -> None:
        """Add what a fault hit, learnt after it fired (the post id of a spoiled item, the
        line left out), to its entry in `fired`."""
        with self._lock:
            decision.entry.update(facts)

    def pick(self, route: Route, size: int) -> int:
        """A deterministic index for faults that touch one item of many."""
        with self._lock:
            return self._random[route].randrange(size)
