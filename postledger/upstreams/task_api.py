"""The client of the paid AI's async task API: `POST /tasks` to create (and pay), `GET
/tasks/{id}` to poll, long-polling while the task runs."""

from __future__ import annotations

import httpx

from postledger.settings import Settings, UpstreamKind
from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    Delivered,
    Look,
    Running,
    TaskStatus,
    UpstreamFailed,
)
from postledger.upstreams.http import (
    HttpUpstream,
    accepted_body,
    answer_of,
    gateway_retries_of,
    lost_answer,
    not_the_answer,
)


class TaskApiClient(HttpUpstream):
    """One upstream speaking the async task API: `create` a task (paid), `look` at it."""

    kind = UpstreamKind.TASK_API
    needs_key = False  # often a server of the user's own
    long_polls = True

    @classmethod
    def keys_honoured(cls, settings: Settings) -> bool:
        return settings.upstream_idempotent

    async def create(self, request: CreateRequest) -> Created:
        """Create (and pay for) the batch's upstream task, under its idempotency key."""
        posts = [{"id": post_id, "text": text} for post_id, text in request.posts]
        analysis = request.analysis
        body = {
            "model": request.model,
            "prompt": analysis.instructions,
            "schema": analysis.item_schema(),
            "posts": posts,
        }
        response = await self._send(
            "POST", "/v1/tasks", json=body, headers={"Idempotency-Key": request.idempotency_key}
        )
        task_id = accepted_body(response).get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise lost_answer(response, "the upstream accepted the task but sent no task_id")
        return Created(task_id, gateway_retries=gateway_retries_of(response.headers))

    async def look(self, task_id: str, *, wait: float = 0.0) -> Look:
        """Read a task once; with `wait`, the upstream may hold the answer until it ends."""
        params = {"wait": f"{wait:g}"} if wait > 0 else None
        # A long poll legitimately takes `wait` seconds longer than a plain read.
        timeout = httpx.Timeout(self._timeouts.read + wait, connect=self._timeouts.connect)
        response = await self._read(f"/v1/tasks/{task_id}", params=params, timeout=timeout)
        if not isinstance(response, httpx.Response):
            return response
        data = answer_of(response, f"task {task_id}")
        if not isinstance(data, dict):
            return data
        try:
            status = TaskStatus(str(data.get("status")))
        except ValueError:
            return not_the_answer(f"task {task_id} has an unexpected status {data.get('status')!r}")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
        if status is TaskStatus.FAILED:
            reason = str(data["error"]) if data.get("error") else "no reason given"
            return UpstreamFailed(f"the upstream task ended failed: {reason}", usage=usage)
        if status is not TaskStatus.SUCCEEDED:
            return Running(status)
        output = data.get("output")
        if not isinstance(output, str):
            return not_the_answer(f"task {task_id} succeeded with no output text")
        return Delivered(output, usage)
