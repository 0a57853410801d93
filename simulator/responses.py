"""The simulator's error answers, in OpenAI's shape for every protocol:
`{"error": {"message", "type", "param", "code"}}`, and the injected transport faults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

from fastapi import Response
from fastapi.responses import JSONResponse

from simulator.faults import Decision


def error(
    status: int,
    kind: str,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    code: str | None = None,
) -> Response:
    body = {"message": message, "type": kind, "param": None, "code": code or kind}
    return JSONResponse({"error": body}, status_code=status, headers=headers)


class _Reset(Response):
    """Promises a body and closes the connection half-way: the client sees a broken
    connection, as after a reset."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"4096")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"task', "more_body": False})


async def transport_fault(
    decision: Decision, answer: Callable[[int], Response] | None = None
) -> Response:
    """The injected fault: a reset connection, an answer held for the rule's `hold` seconds
    (then a 504), or the fault's status; `answer` writes a status in a protocol's own words
    (default: OpenAI's)."""
    fault = decision.fault.removesuffix("_after_create")
    if fault == "reset":
        return _Reset()
    if fault == "timeout":
        await asyncio.sleep(decision.rule.hold)
        if answer is None:
            return error(504, "timeout", "The upstream took too long.")
        return answer(504)
    status = int(fault.removeprefix("http_"))
    if answer is None:
        return error(status, "server_error", f"Simulated HTTP {status}.")
    return answer(status)


def refusal(decision: Decision, *, openai: bool = False) -> Response:
    """A refused request (nothing made, nothing charged). `openai`: as OpenAI answers, where
    an exhausted quota is a 429 whose code says `insufficient_quota`."""
    if decision.fault == "rate_limit":
        value = decision.rule.retry_after
        headers: dict[str, str] = {}
        if value.startswith("date:"):
            headers["Retry-After"] = formatdate(time.time() + float(value[5:]), usegmt=True)
        elif value.startswith("reset:"):  # only OpenAI's x-ratelimit-reset-* headers
            headers["x-ratelimit-reset-requests"] = f"{float(value[6:]):g}s"
            headers["x-ratelimit-reset-tokens"] = "20ms"
        elif value == "garbage":
            headers["Retry-After"] = "soon-ish"
        elif value != "missing":
            headers["Retry-After"] = value
        kind = "requests" if openai else "rate_limit_exceeded"
        return error(
            429, kind, "Rate limit reached for requests.", headers, code="rate_limit_exceeded"
        )
    if decision.fault == "auth":
        kind = "invalid_request_error" if openai else "invalid_api_key"
        return error(401, kind, "Incorrect API key provided.", code="invalid_api_key")
    if decision.fault in ("quota", "quota_429"):
        status = 429 if openai or decision.fault == "quota_429" else 402
        return error(status, "insufficient_quota", "You exceeded your current quota.")
    kind = "invalid_request_error" if openai else "permission_denied"
    return error(403, kind, "This key may not use this model.", code="permission_denied")
