"""Ways a model's output goes wrong: for the whole batch, or for one item of it, in the shape
of the analysis the request asked (`simulator.item_spoils`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from simulator.analyses import analysis_of
from simulator.faults import Decision, Faults, Route
from simulator.item_spoils import (
    second_answer,
    shown_field,
    with_bad_value,
    with_long_string,
    without_field,
)
from simulator.task import SimTask


class Spoiled(NamedTuple):
    text: str
    post_id: str | None  # the post whose item a one-item fault touched


def spoil_output(
    output: str,
    fault: str,
    pick: Callable[[Route, int], int],
    schema: dict[str, Any] | None = None,
) -> Spoiled:
    """`output` as `fault` spoils it; `schema`: the item schema the request asked it in."""
    if fault == "not_json":
        return Spoiled("I'm sorry, but I can't analyse these posts right now.", None)
    if fault == "truncated":
        return Spoiled(output[: max(1, len(output) // 2)], None)
    items: list[dict[str, Any]] = json.loads(output)
    analysis = analysis_of(schema)
    if fault == "wrong_shape":
        shown = shown_field(analysis)
        wrong = {"analysis": [item.get(shown) for item in items]}
        return Spoiled(json.dumps(wrong, ensure_ascii=False), None)
    if fault == "unknown_ids":
        unknown = [{**item, "id": f"x-{item['id']}"} for item in items]
        return Spoiled(json.dumps(unknown, ensure_ascii=False), None)
    index = pick(Route.OUTPUT, len(items))
    item = items[index]
    if fault == "request_error":  # one post's request failed: no item for it
        items.pop(index)
    elif fault == "missing_id":
        items[index] = {k: v for k, v in item.items() if k != "id"}
    elif fault == "stray_id":
        items[index] = {**item, "id": f"{item['id']}-stray"}
    elif fault == "bad_field":
        items[index] = with_bad_value(analysis, item)
    elif fault == "missing_field":
        items[index] = without_field(analysis, item)
    elif fault == "long_string":
        items[index] = with_long_string(analysis, item)
    elif fault == "duplicate_id":
        items.insert(index, second_answer(analysis, item))
    return Spoiled(json.dumps(items, ensure_ascii=False), str(item.get("id")))


def spoil_noted(
    faults: Faults, decision: Decision, output: str, schema: dict[str, Any] | None = None
) -> str:
    """`output` as the decided fault spoils it; the post it touched is noted in `fired`."""
    spoiled = spoil_output(output, decision.fault, faults.pick, schema)
    if spoiled.post_id is not None:
        faults.note(decision, post_id=spoiled.post_id)
    return spoiled.text


def spoiled_by(faults: Faults, **hit: str | None) -> Callable[[SimTask], None]:
    """What a new task meets: the output fault that fires for it, if any (`fired` names the
    task, and `hit`: the batch and request it answers, if any)."""

    def spoil(task: SimTask) -> None:
        if (decision := faults.decide(Route.OUTPUT, task.task_id, **hit)) is not None:
            task.output = spoil_noted(faults, decision, task.output, task.schema)

    return spoil
