"""The client of the paid AI's async task API (httpx).

It makes exactly one HTTP request per call and turns what happened into a typed result or a
typed error; deciding what to do about an error is the business layer's job, not this one's.
The API key travels only in the Authorization header: never in a log line, an exception
message or the ledger.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any

import httpx
from pydantic import SecretStr

TRANSIENT_STATUS = frozenset({500, 502, 503, 504})


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class TaskSnapshot:
    task_id: str
    status: TaskStatus
    output: str | None
    usage: dict[str, Any] | None
    error: str | None

    @property
    def done(self) -> bool:
        return self.status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED)


class UpstreamError(Exception):
    """A call to the upstream did not give a usable answer."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.http_status = status


class TaskStillRunning(UpstreamError):
    """The task was made (and paid for) but did not end before our deadline: it may still
    finish upstream, so it is never replaced by a new one without a person."""


class TransportError(UpstreamError):
    """No answer, or a server-side fault (5xx): worth retrying at the request layer (R10).

    `maybe_sent` is False only when the request certainly never reached the upstream (the
    connection was not made), so a create can be retried without any risk of paying twice.
    """

    def __init__(self, message: str, *, maybe_sent: bool, status: int | None = None) -> None:
        super().__init__(message, status=status)
        self.maybe_sent = maybe_sent


class AmbiguousCreate(UpstreamError):
    """A create may have reached an upstream that does not honour idempotency keys, and no
    answer came back: sending it again could pay twice, so it is not retried automatically."""


class RejectedError(UpstreamError):
    """The upstream answered and refused (4xx): retrying the same request at once will not help.

    `retry_after` is the wait the upstream asked for, in seconds, when it gave a usable one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        error_type: str | None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status)
        self.error_type = error_type
        self.retry_after = retry_after


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None when the
    header is missing or unusable, so the caller falls back to its own default."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class TaskUnknownError(RejectedError):
    """The upstream does not know this task id (R26)."""


@dataclass(frozen=True)
class Timeouts:
    connect: float = 5.0
    read: float = 30.0


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verified TLS context per process: loading the CA bundle costs tens of ms, and a
    client is made per batch call."""
    return ssl.create_default_context()


class TaskApiClient:
    """One upstream speaking the task API: `create_task`, `get_task`."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: SecretStr | None = None,
        timeouts: Timeouts = Timeouts(),
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        headers = {"User-Agent": "postledger"}
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self._timeouts = timeouts
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            verify=_tls_context(),
            timeout=httpx.Timeout(timeouts.read, connect=timeouts.connect),
        )

    async def __aenter__(self) -> TaskApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def create_task(
        self, *, model: str, prompt: str, posts: Sequence[tuple[str, str]], idempotency_key: str
    ) -> str:
        """Create (and pay for) one upstream task; returns its id."""
        body = {"model": model, "prompt": prompt, "posts": [{"id": i, "text": t} for i, t in posts]}
        response = await self._send(
            "POST", "/v1/tasks", json=body, headers={"Idempotency-Key": idempotency_key}
        )
        task_id = _json(response).get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise UpstreamError("the upstream accepted the task but sent no task_id")
        return task_id

    async def get_task(self, task_id: str, *, wait: float = 0.0) -> TaskSnapshot:
        """Read a task once; with `wait`, the upstream may hold the answer until the task ends."""
        params = {"wait": f"{wait:g}"} if wait > 0 else None
        # A long poll legitimately takes `wait` seconds longer than a plain read.
        timeout = httpx.Timeout(self._timeouts.read + wait, connect=self._timeouts.connect)
        response = await self._send("GET", f"/v1/tasks/{task_id}", params=params, timeout=timeout)
        data = _json(response)
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

    async def wait_for_task(
        self, task_id: str, *, poll_interval: float, poll_wait: float, deadline: float
    ) -> TaskSnapshot:
        """Poll until the task ends. Long polls when `poll_wait` > 0, so a result arrives the
        moment it is ready instead of up to one interval late."""
        give_up = time.monotonic() + deadline
        while True:
            remaining = give_up - time.monotonic()
            snapshot = await self.get_task(task_id, wait=min(poll_wait, max(remaining, 0)))
            if snapshot.done:
                return snapshot
            if time.monotonic() >= give_up:
                raise TaskStillRunning(
                    f"task {task_id} still {snapshot.status} after {deadline:g} s; "
                    "it may still finish upstream"
                )
            if poll_wait <= 0:
                await asyncio.sleep(poll_interval)

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, url, **kwargs)
        except httpx.ConnectError as exc:
            raise TransportError(
                f"could not connect to {self.base_url} ({type(exc).__name__})", maybe_sent=False
            ) from None
        except httpx.ConnectTimeout:
            raise TransportError(
                f"connecting to {self.base_url} timed out", maybe_sent=False
            ) from None
        except httpx.TransportError as exc:
            raise TransportError(
                f"{method} {url}: no answer ({type(exc).__name__})", maybe_sent=True
            ) from None
        if response.status_code in TRANSIENT_STATUS:
            raise TransportError(
                f"{method} {url}: HTTP {response.status_code}",
                maybe_sent=True,
                status=response.status_code,
            )
        if response.status_code >= 400:
            error_type, message = _error_of(response)
            cls = TaskUnknownError if response.status_code == 404 else RejectedError
            raise cls(
                self._redact(f"{method} {url}: HTTP {response.status_code}: {message}"),
                status=response.status_code,
                error_type=error_type,
                retry_after=parse_retry_after(response.headers.get("retry-after")),
            )
        return response

    def _redact(self, text: str) -> str:
        if self._api_key is not None and self._api_key.get_secret_value():
            text = text.replace(self._api_key.get_secret_value(), "***")
        return text


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        raise UpstreamError(f"HTTP {response.status_code} with a body that is not JSON") from None
    if not isinstance(data, dict):
        raise UpstreamError(f"HTTP {response.status_code} with a JSON {type(data).__name__}")
    return data


def _error_of(response: httpx.Response) -> tuple[str | None, str]:
    try:
        error = response.json().get("error", {})
        return error.get("type"), str(error.get("message", ""))[:500]
    except (ValueError, AttributeError):
        return None, response.text[:200]
