"""The simulator's HTTP app: the paid services' faces over one upstream, one fault plan and one
charge log, and the control routes tests steer it with.

Its own async task API (/v1/tasks): `simulator.task_api`. The OpenAI protocols:
`simulator.openai_api` (/v1/chat/completions, /v1/files, /v1/batches); Anthropic's Messages
API: `simulator.anthropic_api` (/v1/messages); its Message Batches API:
`simulator.anthropic_batches` (/v1/messages/batches). The control routes (/_sim/charges,
/_sim/bill, /_sim/stats, /_sim/faults, /_sim/reset, /_sim/hold, /_sim/tasks/{id}/forget):
`simulator.control`. Every face shares the upstream's prompt cache (`simulator.caching`) and
bills in money (`simulator.billing`). What the Batch API faces keep between requests is on
disk, in a temporary folder of the app's (`app.state.spool`, `simulator.spool`), removed when
the simulator stops.
"""

from __future__ import annotations

import hmac

from fastapi import FastAPI, Request

from simulator.anthropic_api import add_anthropic_routes
from simulator.anthropic_batches import add_anthropic_batch_routes
from simulator.control import add_control_routes
from simulator.faults import Faults
from simulator.gateway import GatewayHeader
from simulator.openai_api import add_openai_routes
from simulator.spool import TemporarySpool
from simulator.task_api import TaskApi, add_task_routes
from simulator.upstream import Upstream


def create_app(
    upstream: Upstream,
    *,
    api_key: str | None = None,
    create_delay: float = 0.0,
    faults: Faults | None = None,
) -> FastAPI:
    """`create_delay` holds each create's answer after the task was made (and charged): the
    window in which a client has paid but does not know the task id yet (R6)."""
    app = FastAPI(title="postledger upstream simulator", docs_url=None, redoc_url=None)
    app.add_middleware(GatewayHeader)  # the gateway faults' x-litellm-attempted-retries
    faults = faults or Faults()
    spool = TemporarySpool()
    app.state.upstream = upstream
    app.state.faults = faults
    app.state.spool = spool

    def authorized(request: Request) -> bool:
        if api_key is None:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given, f"Bearer {api_key}")

    def key_matches(given: str) -> bool:
        return api_key is None or hmac.compare_digest(given, api_key)

    # Added in this order, the routes are listed (and matched) in it.
    add_task_routes(app, TaskApi(upstream, faults, authorized, create_delay))
    forget_openai = add_openai_routes(app, upstream, faults, authorized, spool.within("openai"))
    add_anthropic_routes(app, upstream, faults, key_matches)
    forget_anthropic_batches = add_anthropic_batch_routes(
        app, upstream, faults, key_matches, spool.within("anthropic")
    )
    add_control_routes(app, upstream, faults, forget=[forget_openai, forget_anthropic_batches])
    return app
