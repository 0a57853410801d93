"""The client of the paid AI's async task API: `POST /tasks` to create (and pay), `GET
/tasks/{id}` to poll, long-polling while the task runs."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    TaskSnapshot,
    TaskStatus,
)
from postledger.upstreams.errors import (
    UpstreamError,
)
from postledger.upstreams.http import (
    HttpUpstream,
    accepted_body,
    gateway_retries_of,
    json_body,
    lost_answer,
)


class TaskApiClient(HttpUpstream):
    """One upstream speaking the async task API: `create_task`, `get_task`."""

    long_polls = True

    async def create(self, request: CreateRequest) -> Created:
        return await self._create(
            model=request.model,
            prompt=request.prompt,
            posts=request.posts,
            idempotency_key=request.idempotency_key,
        )

    async def create_task(
        self, *, model: str, prompt: str, posts: Sequence[tuple[str, str]], idempotency_key: str
    ) -> str:
        """Create (and pay for) one upstream task; returns its id."""
        created = await self._create(
            model=model, prompt=prompt, posts=posts, idempotency_key=idempotency_key
        )
        assert created.task_id is not None
        return created.task_id

    async def _create(
        self, *, model: str, prompt: str, posts: Sequence[tuple[str, str]], idempotency_key: str
    ) -> Created:
        body = {"model": model, "prompt": prompt, "posts": [{"id": i, "text": t} for i, t in posts]}
        response = await self._send(
            "POST", "/v1/tasks", json=body, headers={"Idempotency-Key": idempotency_key}
        )
        task_id = accepted_body(response).get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise lost_answer(response, "the upstream accepted the task but sent no task_id")
        return Created(task_id, gateway_retries=gateway_retries_of(response.headers))

    async def get_task(self, task_id: str, *, wait: float = 0.0) -> TaskSnapshot:
        """Read a task once; with `wait`, the upstream may hold the answer until the task ends."""
        params = {"wait": f"{wait:g}"} if wait > 0 else None
        # A long poll legitimately takes `wait` seconds longer than a plain read.
        timeout = httpx.Timeout(self._timeouts.read + wait, connect=self._timeouts.connect)
        response = await self._send(
            "GET", f"/v1/tasks/{task_id}", reads_task=True, params=params, timeout=timeout
        )
        data = json_body(response)
        try:
            status = TaskStatus(str(data.get("status")))
        except ValueError:
            raise UpstreamError(f"unexpected task status {data.get('status')!r}") from None
        output = data.get("output")
        return TaskSnapshot(
            task_id=task_id,
            status=status,
            output=output if isinstance(output, str) else None,
            usage=data.get("usage") if isinstance(data.get("usage"), dict) else None,
            error=str(data["error"]) if data.get("error") else None,
        )
