"""A gateway in front of the simulator that retried on its own (the LiteLLM proxy): the
`create:gateway_retries` and `create:gateway_retries_then_500` faults of `simulator.faults`.

Such a gateway sent the create again, `retries` times, after attempts it saw fail, and passes
on the answer of its last attempt with `x-litellm-attempted-retries: <retries>`. Each extra
attempt may have made, and been charged for, the whole request: here each one does, as the
route's create would. Every create route asks in one step, after its create
fault is decided:

    decision = faults.decide(Route.CREATE)
    decision = through_gateway(request, faults, decision, make_again)

`through_gateway` runs `make_again` once per extra attempt and returns the fault the
request's own attempt meets: none (`gateway_retries`) or a plain `http_500`
(`gateway_retries_then_500`: nothing more is made, the answer is the route's 500 in its
protocol's words). The header goes on whatever the route then answers: `GatewayHeader`, the
gateway's own layer around the app, adds it.

`make_again` makes the work with no `task` or `output` fault: the extra attempts' answers are
never read, and deciding faults for them would move every rule's counts and random sequence
away from the requests the client sees. (Under an Idempotency-Key the task API honours, the
task an extra attempt makes is the request's own: it meets its faults then, once.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from fastapi import Request
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simulator.faults import CREATE_GATEWAY, Decision, Faults

ATTEMPTED_RETRIES = "x-litellm-attempted-retries"
# Where a route leaves, in its request's state, the retries its answer must report.
_STATE_KEY = "gateway_retries"


@dataclass(frozen=True)
class Made:
    """What one extra attempt made upstream: the charges the gateway is to answer for (task ids
    of the charge log), and the upstream batch it made, if any."""

    charges: list[str] = field(default_factory=list)
    batch: str | None = None


def through_gateway(
    request: Request,
    faults: Faults,
    decision: Decision | None,
    make_again: Callable[[], Made],
) -> Decision | None:
    """The fault the request's own attempt meets, once the gateway's extra attempts (if its
    create fault is a gateway's) are made, charged and written into the fault's `fired`
    entry. Any other decision is returned as it is."""
    if decision is None or decision.fault not in CREATE_GATEWAY:
        return decision
    made = [make_again() for _ in range(decision.rule.retries)]
    faults.note(decision, extra_charges=[charge for one in made for charge in one.charges])
    if batches := [one.batch for one in made if one.batch is not None]:
        faults.note(decision, extra_batches=batches)
    setattr(request.state, _STATE_KEY, decision.rule.retries)
    if decision.fault == "gateway_retries_then_500":
        # The route answers it as any 500 before anything is made; `fired` keeps its name.
        return replace(decision, fault="http_500")
    return None


class GatewayHeader:
    """The gateway's layer around the app: on the answer to a request its route passed
    `through_gateway`, the retries the gateway made. (A plain ASGI layer: it touches only the
    headers, so the `reset` fault's broken body stays broken.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_told(message: Message) -> None:
            retries = scope.get("state", {}).get(_STATE_KEY)
            if message["type"] == "http.response.start" and retries is not None:
                MutableHeaders(scope=message).append(ATTEMPTED_RETRIES, str(retries))
            await send(message)

        await self.app(scope, receive, send_told)
