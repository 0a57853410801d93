"""The simulator's control routes, for tests and benches: what was charged, what it counted,
the faults in force, and a reset to a fresh start.

GET  /_sim/charges        every charged task: the ground truth of what was paid, each with its
                          tokens by class and its `cost` (`simulator.billing.Charge`)
GET  /_sim/bill           {"cost": <every charge's cost, summed>, "charges": <how many>}: the
                          money paid, in micro-units (1 000 000 = $1), summed by the simulator
                          from each charge's own rounded cost (never rounded again)
GET  /_sim/stats          requests by route, tasks in flight now and at most
GET/POST /_sim/faults     the fault plan in force (see `simulator.faults`)
POST /_sim/tasks/{id}/forget   lose one task (its charge stays), as expiring upstreams do
POST /_sim/hold           {held}: no task ends while held; on release each ends one latency later
POST /_sim/reset          {latency, seed, honour_keys, faults}: forget every task, charge, count,
                          fault and cached prompt, as if just started so (tests reuse one process)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field, ValidationError

from simulator.faults import FaultPlan, Faults, load_plan
from simulator.responses import error
from simulator.upstream import Upstream


class HoldTo(BaseModel):
    held: bool


class ResetTo(BaseModel):
    """The options of `postledger sim serve` a reset may change."""

    latency: float = Field(default=1.0, ge=0)
    seed: int = 0
    honour_keys: bool = True
    faults: str | None = None  # the compact form, as --faults takes it


def add_control_routes(
    app: FastAPI, upstream: Upstream, faults: Faults, forget: Sequence[Callable[[], None]]
) -> None:
    """`forget`: what forgets the files and batches the API faces keep, called on a reset."""

    @app.get("/_sim/charges")
    async def charges() -> Any:
        with upstream.lock:
            return {"charges": [c.__dict__ for c in upstream.charges]}

    @app.get("/_sim/bill")
    async def bill() -> Any:
        with upstream.lock:
            return {"cost": sum(c.cost for c in upstream.charges), "charges": len(upstream.charges)}

    @app.get("/_sim/stats")
    async def stats() -> Any:
        return {**upstream.stats(time.monotonic()), "faults_fired": len(faults.fired)}

    @app.get("/_sim/faults")
    async def get_faults() -> Any:
        return {"plan": faults.plan.model_dump(mode="json"), "fired": faults.fired}

    @app.post("/_sim/faults")
    async def set_faults(plan: FaultPlan) -> Any:
        faults.replace(plan)
        return {"plan": plan.model_dump(mode="json")}

    @app.post("/_sim/reset")
    async def reset(options: ResetTo) -> Any:
        """Forget every task, file, batch, charge, count and fault, and go on as if just
        started with these options: tests reuse one simulator process for many tests."""
        try:
            plan = load_plan(options.faults, None, options.seed)
        except (ValidationError, ValueError) as exc:
            return error(422, "invalid_request_error", f"bad fault plan: {exc}")
        upstream.reset(latency=options.latency, seed=options.seed, honour_keys=options.honour_keys)
        faults.replace(plan)
        for forget_kept in forget:
            forget_kept()
        return {"plan": plan.model_dump(mode="json")}

    @app.post("/_sim/hold")
    async def hold(to: HoldTo) -> Any:
        """Keep every task in flight until released: a test that needs work in flight at a
        given moment holds it there rather than hoping the latency outlasts its setup."""
        upstream.hold(to.held, time.monotonic())
        return {"held": to.held}

    @app.post("/_sim/tasks/{task_id}/forget")
    async def forget_task(task_id: str) -> Any:
        """Lose one task, as an upstream that expires tasks does (its charge stays)."""
        upstream.forget(task_id)
        return {"forgotten": task_id}
