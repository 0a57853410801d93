"""The simulator's OpenAI Files API: a batch's input file is uploaded here, and its output and
error files are read back from here.

POST /v1/files                multipart upload (purpose=batch) of a Batch API input file
GET  /v1/files/{id}[/content] a file, or its bytes (input, output and error files)

Fault route: `results` is GET /v1/files/{id}/content (its read faults: `simulator.read_faults`).

A file is never held in memory: an upload is read as it arrives, its file part written
straight to disk (`simulator.multipart`), and a file's bytes are streamed from disk.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

from simulator.faults import Route
from simulator.multipart import FormPart, FormReader
from simulator.openai_batch_rules import MAX_FILE_BYTES, upload_problem
from simulator.openai_state import OpenAIState, denied, invalid
from simulator.read_faults import answered_early, spoiled_file_at
from simulator.spool import discard

# The parts an upload is read for: the file goes to disk, its purpose stays in memory.
_KEPT = frozenset({"file", "purpose"})
_ON_DISK = frozenset({"file"})


async def _form(request: Request, state: OpenAIState) -> dict[str, FormPart]:
    """The upload's parts, read as the body arrives (the file's straight to disk)."""
    content_type = request.headers.get("content-type", "")
    reader = FormReader(content_type, state.spool, _KEPT, _ON_DISK, MAX_FILE_BYTES)
    try:
        async for chunk in request.stream():
            reader.feed(chunk)
        return reader.close()
    except BaseException:
        reader.discard()
        raise


def add_file_routes(app: FastAPI, state: OpenAIState) -> None:
    files, faults = state.files, state.faults

    @app.post("/v1/files")
    async def upload_file(request: Request) -> Any:
        state.upstream.count_request("files")
        if not state.authorized(request):
            return denied()
        parts = await _form(request, state)
        file, purpose_part = parts.get("file"), parts.get("purpose")
        try:
            if file is None or file.path is None:
                return invalid("a multipart `file` is required")
            purpose = purpose_part.value.decode() if purpose_part is not None else ""
            if purpose != "batch":
                return invalid(f"purpose {purpose!r} is not supported here; use `batch`")
            if (problem := upload_problem(file.filename or "", file.size)) is not None:
                return invalid(problem)
            made = state.add_file(file.filename or "upload.jsonl", purpose, file.path, file.size)
            file.path = None  # now the file's own
            return made.body()
        finally:
            discard(*(part.path for part in parts.values()))

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
        content = invalid(f"No such File object: {file_id}", 404) if found is None else found.path
        return spoiled_file_at(faults, decision, content, "application/octet-stream")
