"""The simulator's OpenAI face: chat completions and the Batch API, over the same tasks, the
same fault injection and the same charge log as the task API.

POST /v1/chat/completions     one synchronous completion: charged, answered after the latency
POST /v1/files                multipart upload (purpose=batch) of a Batch API input file
GET  /v1/files/{id}[/content] a file, or its bytes (input, output and error files)
POST /v1/batches              {input_file_id, endpoint, completion_window, metadata}: charged
GET  /v1/batches              the batches, newest first; `limit`, `after`
GET  /v1/batches/{id}         one batch; output and error files once it ended
POST /v1/batches/{id}/cancel  cancelling -> cancelled; the requests not yet run are undone

Each resource's routes are in their own module: `simulator.openai_chat`,
`simulator.openai_files` and `simulator.openai_batches` (with `simulator.openai_batch_output`
and `simulator.openai_batch_rules`); the files and batches they share are one
`simulator.openai_state.OpenAIState`, its files on disk (`simulator.spool`).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request

from simulator.faults import Faults
from simulator.openai_batches import add_batch_routes
from simulator.openai_chat import add_chat_routes, chat_input
from simulator.openai_files import add_file_routes
from simulator.openai_state import OpenAIState
from simulator.spool import Spool
from simulator.upstream import Upstream

__all__ = ["add_openai_routes", "chat_input"]  # chat_input: its old home, for old imports


def add_openai_routes(
    app: FastAPI,
    upstream: Upstream,
    faults: Faults,
    authorized: Callable[[Request], bool],
    spool: Spool,
) -> Callable[[], None]:
    """Adds the routes; returns what forgets every file and batch (`POST /_sim/reset`).
    `spool`: where its files are kept."""
    state = OpenAIState(upstream, faults, authorized, spool)
    add_chat_routes(app, state)
    add_file_routes(app, state)
    add_batch_routes(app, state)
    return state.forget_all
