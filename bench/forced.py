"""Which post-charges the faults a simulator fired force, under postledger's rules, and which
go beyond them: `bench/faults.py`'s figure, computed from the evidence alone (the simulator's
charge log and `fired` list, and what the ledger received).

For each post, its charges are walked in charge-log order. The first is needed. A later one is
forced only when the post's previous charge's task met a fault that calls for another paid
attempt of that post:
- a `task` fault on the task API (the task failed: every post of it). On a Batch API a task
  fault forces nothing the charge log holds: there the simulator bills only the requests that
  ran, and each of those has its answer (OpenAI: a failed job is not billed at all, an expired
  or cancelled one only for the lines that ran; Anthropic: a request a task fault stopped is
  not billed);
- a whole-output fault (`not_json`, `wrong_shape`, `unknown_ids`): every post of the task, or
  on a Batch API every post of the one request line (`custom_id`) it spoiled;
- `truncated`: the posts with no complete item in the cut output, read from the raw output the
  ledger saved for that task (or line); when the ledger no longer holds that output, every post
  of the task (or line), and the figures say how often that happened;
- a one-item fault (`missing_id`, `stray_id`, `bad_field`, `missing_field`, `long_string`,
  `duplicate_id`, `request_error` where it spoils one item): the post it names;
  `request_error` on OpenAI's Batch API fails a whole request line: every post of that line.
- a lost create answer (`create:*_after_create`: the upstream made the work and charged it,
  the answer never came; the fired entry's `made` names its charges): every post of each task
  it made, when the made work can be neither found nor reused, so that the only way on is to
  send it again, which a person must say yes to. That is an upstream that honours no
  idempotency key and cannot list its jobs: Anthropic's Messages API, OpenAI's chat
  completions, and the task API when it does not honour keys. The bench gives that yes up
  front from its second run on (`resubmit=True`), so the resend, and its charge, is forced
  there. A task API that honours keys (as `bench/faults.py` runs it) answers the resend under
  the same key with the task already made and charges nothing, OpenAI's Batch API finds its
  job by its metadata, and Anthropic's Message Batches are found by the requests they carry:
  there a lost create answer forces nothing, and a second charge is beyond. The post's
  previous charge's task is then one whose answer was never read: its own `task` or `output`
  faults, if any, are not what forced the next charge.
A charge a gateway made on its own (`gateway_retries`: the fired entry's `extra_charges`) is
forced, and it is not the "previous charge" of anything: its answer is never read.
Everything else is beyond what the faults force.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from postledger.upstreams.anthropic_batch_match import batch_of_line

TASK_API = "task_api"
ONE_ITEM = {
    "missing_id",
    "stray_id",
    "bad_field",
    "missing_field",
    "long_string",
    "duplicate_id",
    "request_error",
}
# The kinds whose made work a lost create answer leaves unfindable: no idempotency key is
# honoured, no job can be listed (the task API is one too when it does not honour keys).
# Anthropic's Message Batches are found by the requests they carry (`anthropic_batch_match`).
UNFINDABLE = {"openai_chat", "anthropic_messages"}


@dataclass(frozen=True)
class LedgerBatch:
    """What the evidence needs of one ledger batch: the posts it was sent with (on a Batch API,
    the posts of its request line: its id is the line's `custom_id`), and the last raw output
    it received, with the upstream task (task API) or job (Batch API) that gave it."""

    batch_id: str
    posts: list[str]
    upstream_id: str | None
    raw_output: str | None


@dataclass(frozen=True)
class Beyond:
    """One charge of one post that no fault forced, after the post's previous charge."""

    post_id: str
    previous: str  # task ids, as the charge log names them
    task_id: str
    # Under the same idempotency key as the previous one: the same request sent again (an
    # uncertain batch resent), not a new attempt after a verdict.
    same_request: bool


@dataclass
class Accounting:
    """The post-charges, by what made each one necessary (or nothing)."""

    first: int = 0
    forced: Counter[str] = field(default_factory=Counter)  # the forcing fault -> post-charges
    beyond: list[Beyond] = field(default_factory=list)
    # `truncated` faults whose cut output the ledger did not hold: every post counted as forced
    truncated_counted_whole: int = 0

    def summary(self) -> dict[str, object]:
        """The figures, and the charges beyond grouped by the pair of charges they follow."""
        groups: dict[tuple[str, str, bool], list[str]] = {}
        for one in self.beyond:
            groups.setdefault((one.previous, one.task_id, one.same_request), []).append(one.post_id)
        return {
            "first_charges": self.first,
            "forced_post_charges": dict(sorted(self.forced.items())),
            "truncated_counted_whole": self.truncated_counted_whole,
            "beyond_what_the_faults_force": len(self.beyond),
            "beyond": [
                {
                    "previous_task": previous,
                    "task": task_id,
                    "same_request": same_request,
                    "post_ids": post_ids,
                }
                for (previous, task_id, same_request), post_ids in groups.items()
            ],
        }


def account(
    kind: str,
    charges: Sequence[Mapping[str, Any]],
    fired: Iterable[Mapping[str, Any]],
    batches: Iterable[LedgerBatch],
    *,
    keys_honoured: bool,
) -> Accounting:
    """Every post-charge of the charge log, walked in order: first, forced (by which fault), or
    beyond. `keys_honoured`: the task API honours idempotency keys (and postledger is told so);
    the other kinds ignore it."""
    posts_of_task = {str(c["task_id"]): [str(p) for p in c["post_ids"]] for c in charges}
    key_of_task = {str(c["task_id"]): c.get("idempotency_key") for c in charges}
    fired = list(fired)
    extra = {str(task_id) for entry in fired for task_id in entry.get("extra_charges", [])}
    result = Accounting()
    forces = _forcing(kind, posts_of_task, fired, list(batches), result)
    unfindable = kind in UNFINDABLE or (kind == TASK_API and not keys_honoured)
    if unfindable:
        for task_id, posts in _lost_creates(posts_of_task, fired).items():
            forces.setdefault(task_id, {}).update(posts)  # its answer was never read

    previous: dict[str, str] = {}  # post id -> the task of its last charge postledger made
    for charge in charges:
        task_id = str(charge["task_id"])
        for post_id in posts_of_task[task_id]:
            if task_id in extra:
                result.forced["create:gateway_retries"] += 1
                continue
            before = previous.get(post_id)
            previous[post_id] = task_id
            if before is None:
                result.first += 1
            elif post_id in forces.get(before, {}):
                result.forced[forces[before][post_id]] += 1
            else:
                same = (
                    key_of_task[before] is not None and key_of_task[before] == key_of_task[task_id]
                )
                result.beyond.append(Beyond(post_id, before, task_id, same))
    return result


def _forcing(
    kind: str,
    posts_of_task: Mapping[str, list[str]],
    fired: Iterable[Mapping[str, Any]],
    batches: list[LedgerBatch],
    result: Accounting,
) -> dict[str, dict[str, str]]:
    """task id -> {post id: the fault of that task that forces the post's next charge}."""
    lines = {batch.batch_id: batch.posts for batch in batches}
    received: dict[str, dict[str, str]] = {}  # upstream id -> {ledger batch id: raw output}
    for batch in batches:
        if batch.upstream_id is not None and batch.raw_output is not None:
            received.setdefault(batch.upstream_id, {})[batch.batch_id] = batch.raw_output
    forces: dict[str, dict[str, str]] = {}
    for entry in fired:
        task_id = str(entry.get("id"))
        if entry["on"] not in ("task", "output") or task_id not in posts_of_task:
            continue  # a fault of no charged task: nothing it could force is in the log
        posts = posts_of_task[task_id]
        fault = str(entry["fault"])
        custom_id = _line_of(entry)
        if entry["on"] == "task":
            hit = posts if kind == TASK_API else []
        elif fault in ONE_ITEM and "post_id" in entry:
            hit = [str(entry["post_id"])]
        else:
            if custom_id is not None:  # a Batch API's output fault: one request line
                posts = [post for post in lines.get(str(custom_id), []) if post in posts]
            if fault == "truncated":
                upstream_id = str(entry.get("batch_id") or task_id)
                output = _output_of(received.get(upstream_id, {}), custom_id)
                complete = _complete_item_ids(output) if output is not None else None
                if complete is None:
                    result.truncated_counted_whole += 1
                else:
                    posts = [post for post in posts if post not in complete]
            hit = posts
        for post_id in hit:
            forces.setdefault(task_id, {})[post_id] = f"{entry['on']}:{fault}"
    return forces


def _lost_creates(
    posts_of_task: Mapping[str, list[str]], fired: Iterable[Mapping[str, Any]]
) -> dict[str, dict[str, str]]:
    """task id -> {post id: the create fault that made the task and lost its answer}: every
    post of each charged task a `create:*_after_create` entry names in `made`."""
    lost: dict[str, dict[str, str]] = {}
    for entry in fired:
        fault = str(entry["fault"])
        if entry["on"] != "create" or not fault.endswith("_after_create"):
            continue
        for task_id in map(str, entry.get("made", [])):
            for post_id in posts_of_task.get(task_id, []):  # a charge taken back: none
                lost.setdefault(task_id, {})[post_id] = f"create:{fault}"
    return lost


def _line_of(entry: Mapping[str, Any]) -> str | None:
    """The ledger batch of the request line a fired entry names by its `custom_id` (on
    Anthropic the batch id with its submission's token), if it names one."""
    custom_id = entry.get("custom_id")
    return None if custom_id is None else batch_of_line(str(custom_id))


def _output_of(outputs: Mapping[str, str], custom_id: Any) -> str | None:
    """The raw output of the ledger batch that received this upstream answer: the line's own on
    a Batch API; on the task API the one batch that task answered."""
    if custom_id is not None:
        return outputs.get(str(custom_id))
    return next(iter(outputs.values())) if len(outputs) == 1 else None


def _complete_item_ids(raw: str) -> set[str] | None:
    """The ids of the complete items at the start of a JSON list cut short (bare, or as a
    `{"results": [` object); None if `raw` is not such a cut list (it parses whole, or is not a
    list at all): then it is not the cut output this fault made."""
    try:
        json.loads(raw)
        return None
    except ValueError:
        pass
    text = raw.lstrip()
    for opening in ("[", '{"results": ['):
        if text.startswith(opening):
            position = len(opening)
            break
    else:
        return None
    decoder, ids = json.JSONDecoder(), set[str]()
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        try:
            item, position = decoder.raw_decode(text, position)
        except ValueError:
            return ids
        if isinstance(item, dict) and "id" in item:
            ids.add(str(item["id"]))


def unbilled_sends(
    kind: str,
    charges: Sequence[Mapping[str, Any]],
    fired: Iterable[Mapping[str, Any]],
    batches: Iterable[LedgerBatch],
    jobs: Mapping[str, list[str]],
) -> Counter[str]:
    """post id -> how many of its sends a Batch API never ran, and so never billed, though
    each counts as an attempt (R38: an attempt is given back only when the upstream certainly
    never took the request): on Anthropic, each request a task fault stopped (`custom_id`); on
    OpenAI, every line of a job whose task failed (the simulator fails it as an input file that
    failed validation), and the lines an expired or cancelled job never ran (its charge keeps
    only the posts that ran). `jobs`: upstream job id -> the ledger batches (request lines) it
    carried."""
    if kind == TASK_API:
        return Counter()
    lines = {batch.batch_id: batch.posts for batch in batches}
    billed = {str(c["task_id"]): set(map(str, c["post_ids"])) for c in charges}
    unbilled: Counter[str] = Counter()
    for entry in fired:
        if entry["on"] != "task":
            continue
        if "custom_id" in entry:  # one request of an Anthropic Message Batch
            unbilled.update(lines.get(str(_line_of(entry)), []))
            continue
        job_lines = jobs.get(str(entry.get("batch_id")), [])
        job_posts = [post for line in job_lines for post in lines.get(line, [])]
        ran = billed.get(str(entry.get("id")), set())
        unbilled.update(post for post in job_posts if post not in ran)
    return unbilled
