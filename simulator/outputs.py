"""Ways a model's output goes wrong: for the whole batch, or for one item of it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from simulator.faults import Faults, Route
from simulator.upstream import SimTask


def spoil_output(output: str, fault: str, pick: Callable[[Route, int], int]) -> str:
    if fault == "not_json":
        return "I'm sorry, but I can't analyse these posts right now."
    if fault == "truncated":
        return output[: max(1, len(output) // 2)]
    items: list[dict[str, Any]] = json.loads(output)
    if fault == "wrong_shape":
        return json.dumps({"analysis": [item["summary"] for item in items]}, ensure_ascii=False)
    if fault == "unknown_ids":
        return json.dumps([{**item, "id": f"x-{item['id']}"} for item in items], ensure_ascii=False)
    index = pick(Route.OUTPUT, len(items))
    item = items[index]
    if fault == "request_error":  # one post's request failed: no item for it
        items.pop(index)
    elif fault == "missing_id":
        items[index] = {k: v for k, v in item.items() if k != "id"}
    elif fault == "stray_id":
        items[index] = {**item, "id": f"{item['id']}-stray"}
    elif fault == "bad_field":
        items[index] = {**item, "sentiment": "ecstatic"}
    elif fault == "duplicate_id":
        items.insert(index, {**item, "summary": "A second, different answer for the same post."})
    return json.dumps(items, ensure_ascii=False)


def spoiled_by(faults: Faults) -> Callable[[SimTask], None]:
    """What a synchronous call's new task meets: the output fault that fires for it, if any."""

    def spoil(task: SimTask) -> None:
        if (decision := faults.decide(Route.OUTPUT)) is not None:
            task.output = spoil_output(task.output, decision.fault, faults.pick)

    return spoil
