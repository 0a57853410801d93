"""How a read answer is spoiled: the `poll`, `results` and `list` faults of `simulator.faults`,
in one place for every route that reads (the task API, OpenAI's batches and files,
Anthropic's Message Batches).

A read fault spoils the answer, never what it describes: the batch, its files and its charge
stay as they were, so the next read without a fault gives the true answer. Each route asks
in two steps, so that it computes its true answer only when a fault needs it:

    decision = faults.decide(Route.POLL, batch_id)
    if (early := await answered_early(decision, status_answer)) is not None:
        return early                      # transport faults, html: no true answer needed
    return spoiled_answer(faults, decision, true_answer, status_field="status")

(`spoiled_file` for `results`, whose true answer is JSONL bytes; `spoiled_file_at` for one
kept on disk, which streams it from there unless a fault spoils it.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Response
from fastapi.responses import FileResponse

from simulator.faults import READ_REFUSED, TRANSPORT, Decision, Faults, Route
from simulator.responses import refusal, transport_fault

# What a misrouted gateway or a captive portal answers, whatever was asked.
CAPTIVE_PORTAL = """<!DOCTYPE html>
<html><head><title>Sign in to continue</title></head>
<body><h1>Welcome to the guest network</h1>
<p>Please <a href="/portal/login">sign in</a> to continue to the internet.</p></body></html>
"""
# A status no provider documents: a client must not take it for an end, good or bad.
UNDOCUMENTED_STATUS = "paused"
# Where a gateway in front of Anthropic leaves an ended batch's results_url pointing.
FOREIGN_RESULTS_URL = "https://api.anthropic.com/v1/messages/batches/{id}/results"


async def answered_early(
    decision: Decision | None,
    answer: Callable[[int], Response] | None = None,
    refuse: Callable[[Decision], Response] = refusal,
) -> Response | None:
    """The answer of a read fault that needs no true answer: a transport fault (`answer`
    writes a status in the protocol's words), a refusal (`refuse`, in the protocol's words),
    or the captive portal; None: read on."""
    if decision is None:
        return None
    if decision.fault in TRANSPORT:
        return await transport_fault(decision, answer)
    if decision.fault in READ_REFUSED:
        return refuse(decision)
    if decision.fault == "html":
        return Response(CAPTIVE_PORTAL, media_type="text/html; charset=utf-8")
    return None


def spoiled_answer(
    faults: Faults,
    decision: Decision | None,
    true_answer: Response | dict[str, Any],
    *,
    status_field: str = "status",
) -> Response | dict[str, Any]:
    """The JSON answer of a poll or a listing as the fault leaves it. An error answer (a 404)
    passes unspoiled, as does any fault this function does not spoil (`forget` was the
    route's)."""
    if decision is None or decision.fault not in JSON_SPOILERS:
        return true_answer
    if isinstance(true_answer, Response):
        faults.note(decision, applied=False)
        return true_answer
    spoiled = JSON_SPOILERS[decision.fault](decision, true_answer, status_field)
    if spoiled is None:
        faults.note(decision, applied=False)
        return true_answer
    return spoiled


def _cut_json(_: Decision, body: dict[str, Any], __: str) -> Response:
    """A complete 200 response whose JSON ends half-way, as a proxy that dropped the
    connection mid-body and re-framed what it had leaves it."""
    text = json.dumps(body, ensure_ascii=False).encode()
    return Response(text[: len(text) // 2], media_type="application/json")


def _wrong_shape(decision: Decision, body: dict[str, Any], _: str) -> Response:
    """Valid JSON that is not the object asked for: a list (odd-numbered requests) or an
    object with none of its fields (even ones), so both mistakes of a reader are met."""
    if decision.entry.get("n", 1) % 2:
        return _json([body])
    return _json({"message": "Request forwarded.", "gateway": "edge-7"})


def _bad_status(_: Decision, body: dict[str, Any], status_field: str) -> Response:
    return _json({**body, status_field: UNDOCUMENTED_STATUS})


def _foreign_results_url(_: Decision, body: dict[str, Any], __: str) -> Response | None:
    """Only an ended Anthropic batch has a results_url to rewrite: elsewhere, no fault."""
    if not body.get("results_url"):
        return None
    return _json({**body, "results_url": FOREIGN_RESULTS_URL.format(id=body["id"])})


def _json(body: Any) -> Response:
    return Response(json.dumps(body, ensure_ascii=False), media_type="application/json")


JSON_SPOILERS: dict[str, Callable[[Decision, dict[str, Any], str], Response | None]] = {
    "cut_json": _cut_json,
    "wrong_shape": _wrong_shape,
    "bad_status": _bad_status,
    "foreign_results_url": _foreign_results_url,
}


_FILE_SPOILERS = ("cut_file", "missing_lines")


def spoiled_file(
    faults: Faults, decision: Decision | None, true_answer: Response | bytes, media_type: str
) -> Response:
    """A results file (JSONL) as the fault leaves it: cut mid-line, or one line left out."""
    if isinstance(true_answer, Response):
        if decision is not None and decision.fault in _FILE_SPOILERS:
            faults.note(decision, applied=False)
        return true_answer
    content = true_answer
    if decision is not None and decision.fault == "cut_file":
        content = _cut_mid_line(content)
    elif decision is not None and decision.fault == "missing_lines":
        content = _without_one_line(faults, decision, content)
    return Response(content, media_type=media_type)


def spoiled_file_at(
    faults: Faults, decision: Decision | None, true_answer: Response | Path, media_type: str
) -> Response:
    """A results file kept on disk as the fault leaves it: streamed from disk when no fault
    spoils it, read whole only for one that does (they are armed on small test months)."""
    if not isinstance(true_answer, Path):
        return spoiled_file(faults, decision, true_answer, media_type)
    if decision is None or decision.fault not in _FILE_SPOILERS:
        return FileResponse(true_answer, media_type=media_type)
    return spoiled_file(faults, decision, true_answer.read_bytes(), media_type)


def _cut_mid_line(content: bytes) -> bytes:
    """The first half of the bytes, moved back one byte should that end a line: a reader
    must see a broken last line, not a shorter whole file."""
    end = max(1, len(content) // 2)
    if content[end - 1 : end] == b"\n" and end > 1:
        end -= 1
    return content[:end]


def _without_one_line(faults: Faults, decision: Decision, content: bytes) -> bytes:
    """One line, picked by the seed, left out; its custom_id is noted in `fired`."""
    lines = content.splitlines(keepends=True)
    if not lines:
        faults.note(decision, applied=False)
        return content
    dropped = lines.pop(faults.pick(Route.RESULTS, len(lines)))
    try:
        custom_id = json.loads(dropped).get("custom_id")
    except (ValueError, AttributeError):
        custom_id = None
    if custom_id is not None:
        faults.note(decision, custom_id=str(custom_id))
    return b"".join(lines)
