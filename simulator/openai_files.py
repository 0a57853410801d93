"""The simulator's OpenAI Files API: a batch's input file is uploaded here, and its output and
error files are read back from here.

POST /v1/files                multipart upload (purpose=batch) of a Batch API input file
GET  /v1/files/{id}[/content] a file, or its bytes (input, output and error files)

Fault route: `results` is GET /v1/files/{id}/content (its read faults: `simulator.read_faults`).
"""

from __future__ import annotations

from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from fastapi import FastAPI, Request

from simulator.faults import Route
from simulator.openai_batch_rules import upload_problem
from simulator.openai_state import OpenAIState, denied, invalid
from simulator.read_faults import answered_early, spoiled_file


def _parse_multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """name -> (filename, bytes) of a multipart/form-data body."""
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw
    )
    parts: dict[str, tuple[str | None, bytes]] = {}
    if not message.is_multipart():
        return parts
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if name:
            parts[str(name)] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return parts


def add_file_routes(app: FastAPI, state: OpenAIState) -> None:
    files, faults = state.files, state.faults

    @app.post("/v1/files")
    async def upload_file(request: Request) -> Any:
        state.upstream.count_request("files")
        if not state.authorized(request):
            return denied()
        parts = _parse_multipart(request.headers.get("content-type", ""), await request.body())
        if "file" not in parts:
            return invalid("a multipart `file` is required")
        purpose = parts.get("purpose", (None, b""))[1].decode()
        if purpose != "batch":
            return invalid(f"purpose {purpose!r} is not supported here; use `batch`")
        filename, content = parts["file"]
        if (problem := upload_problem(filename or "", len(content))) is not None:
            return invalid(problem)
        return state.add_file(filename or "upload.jsonl", purpose, content).body()

    @app.get("/v1/files/{file_id}")
    async def get_file(file_id: str, request: Request) -> Any:
        if not state.authorized(request):
            return denied()
        found = files.get(file_id)
        return found.body() if found else invalid(f"No such File object: {file_id}", 404)

    @app.get("/v1/files/{file_id}/content")
    async def file_content(file_id: str, request: Request) -> Any:
        if not state.authorized(request):
            return denied()
        found = files.get(file_id)
        batch_id = found.batch_id if found is not None else None
        decision = faults.decide(Route.RESULTS, file_id, batch_id=batch_id)
        if (early := await answered_early(decision)) is not None:
            return early
        content = (
            invalid(f"No such File object: {file_id}", 404) if found is None else found.content
        )
        return spoiled_file(faults, decision, content, "application/octet-stream")
