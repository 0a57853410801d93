"""The simulator's OpenAI face: chat completions and the Batch API, over the same tasks, the
same fault injection and the same charge log as the task API.

POST /v1/chat/completions     one synchronous completion: charged, answered after the latency
POST /v1/files                multipart upload (purpose=batch) of a Batch API input file
GET  /v1/files/{id}[/content] a file, or its bytes (input, output and error files)
POST /v1/batches              {input_file_id, endpoint, completion_window, metadata}: charged
GET  /v1/batches              the batches, newest first; `limit`, `after`
GET  /v1/batches/{id}         one batch; output and error files once it ended
POST /v1/batches/{id}/cancel  cancelling -> cancelled; the requests not yet run are undone

Fault routes (`simulator.faults`): `poll` is GET /v1/batches/{id}, `results` GET
/v1/files/{id}/content, `list` GET /v1/batches (their read faults: `simulator.read_faults`).

A batch runs all its requests as one simulated task (one charge listing every post, under the
`postledger_key` of its metadata), which takes the simulator's latency; its output is then
split into one output line per request (its `custom_id`), each answering for the posts of its
own chat request.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Response

from simulator.faults import CREATE_AFTER, CREATE_REFUSED, WHOLE_OUTPUT, Decision, Faults, Route
from simulator.gateway import Made, through_gateway
from simulator.model import count_tokens
from simulator.openai_batch_rules import create_problem, line_errors, upload_problem
from simulator.outputs import spoil_noted, spoil_output, spoiled_by
from simulator.read_faults import answered_early, spoiled_answer, spoiled_file
from simulator.responses import error, refusal, transport_fault
from simulator.upstream import SimTask, TaskState, Upstream, until_done

ENDPOINT = "/v1/chat/completions"
UNDONE = {
    "expired": (
        "batch_expired",
        "This request could not be executed before the completion window expired.",
    ),
    "cancelled": ("batch_cancelled", "This request was not executed: the batch was cancelled."),
}


@dataclass
class SimFile:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int
    batch_id: str | None = None  # the batch whose output or error file it is

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


@dataclass
class SimBatch:
    id: str
    task: SimTask
    input_file_id: str
    completion_window: str
    metadata: dict[str, str]
    created_at: int
    fate: str = "completed"  # how it ends: completed, failed, expired, cancelled
    # Each request: its custom_id and the ids of the posts its chat request carries.
    requests: list[tuple[str, list[str]]] = field(default_factory=list)
    json_mode: bool = True  # the requests asked for a JSON object (response_format)
    failed_request: str | None = None  # a request_error fault: this request fails
    spoiled_request: tuple[str, str] | None = None  # a whole-output fault: (request, fault)
    cancel_at: float | None = None  # monotonic, when a cancel was asked
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    # Why its input file failed validation, one item per bad line (`errors.data`).
    line_errors: list[dict[str, Any]] = field(default_factory=list)

    def status(self, now: float) -> str:
        if self.cancel_at is not None and self.task.state(now) not in _ENDED:
            return "cancelled" if now >= self.cancel_at + 0.05 else "cancelling"
        state = self.task.state(now)
        if state is TaskState.QUEUED:
            return "validating"
        if state is TaskState.RUNNING:
            return "in_progress"
        return self.fate


_ENDED = (TaskState.SUCCEEDED, TaskState.FAILED)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _text_of(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def chat_input(messages: Any) -> tuple[str, list[tuple[str, str]]]:
    """(prompt, posts) of a chat request: the system messages, and the posts of the last user
    message (`{"posts": [{id, text}]}` as postledger sends; any other text is one post)."""
    messages = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    prompt = "\n".join(_text_of(m.get("content")) for m in messages if m.get("role") == "system")
    user = next(
        (_text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    try:
        posts = [(str(p["id"]), str(p["text"])) for p in json.loads(user)["posts"]]
    except (ValueError, KeyError, TypeError):
        posts = []
    return prompt, posts or [("1", user)]


def _answer_text(output: str, json_mode: bool) -> str:
    """The model's text: its JSON list, wrapped as {"results": [...]} when the request asked
    for a JSON object (response_format); spoiled output is passed on as it is."""
    if not json_mode:
        return output
    try:
        items = json.loads(output)
    except ValueError:
        return output
    return json.dumps({"results": items}, ensure_ascii=False) if isinstance(items, list) else output


def completion(
    model: str, content: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    return {
        "id": _new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _json_mode(body: dict[str, Any]) -> bool:
    format_ = body.get("response_format")
    return isinstance(format_, dict) and format_.get("type") in ("json_object", "json_schema")


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


def add_openai_routes(
    app: FastAPI, upstream: Upstream, faults: Faults, authorized: Callable[[Request], bool]
) -> Callable[[], None]:
    """Adds the routes; returns what forgets every file and batch (`POST /_sim/reset`)."""
    files: dict[str, SimFile] = {}
    batches: dict[str, SimBatch] = {}
    lock = threading.RLock()  # finishing a batch adds its files under the same lock

    def forget_all() -> None:
        with lock:
            files.clear()
            batches.clear()

    def denied() -> Response:
        return error(
            401, "invalid_request_error", "Incorrect API key provided.", code="invalid_api_key"
        )

    def invalid(message: str, status: int = 400) -> Response:
        return error(status, "invalid_request_error", message)

    def add_file(
        filename: str, purpose: str, content: bytes, batch_id: str | None = None
    ) -> SimFile:
        made = SimFile(_new_id("file"), filename, purpose, content, int(time.time()), batch_id)
        with lock:
            files[made.id] = made
        return made

    # --- chat completions --------------------------------------------------------------------

    def completion_task(
        body: dict[str, Any], request: Request, on_new: Callable[[SimTask], None] | None
    ) -> SimTask:
        """The task of a chat request, made and charged (no keys: each request is new)."""
        prompt, posts = chat_input(body["messages"])
        task, _ = upstream.create(
            model=str(body["model"]),
            prompt=prompt,
            posts=posts,
            idempotency_key=request.headers.get("idempotency-key"),
            now=time.monotonic(),
            on_new=on_new,
            honour_key=False,
        )
        return task

    def billed_content(task: SimTask, body: dict[str, Any]) -> str:
        """The answer's text; the charge is the usage the answer reports."""
        content = _answer_text(task.output, _json_mode(body))
        upstream.bill_usage(task.task_id, task.input_tokens, count_tokens(content))
        return content

    def completion_again(body: dict[str, Any], request: Request) -> Made:
        """A gateway's extra attempt: a completion charged, its answer dropped."""
        task = completion_task(body, request, None)
        billed_content(task, body)
        return Made([task.task_id])

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        upstream.count_request("create")
        if not authorized(request):
            return denied()
        body = await request.json()
        if not isinstance(body, dict) or not body.get("model") or not body.get("messages"):
            return invalid("model and messages are required")
        decision = faults.decide(Route.CREATE)
        if decision is not None and decision.fault in CREATE_REFUSED:
            return refusal(decision, openai=True)
        decision = through_gateway(
            request, faults, decision, lambda: completion_again(body, request)
        )
        if decision is not None and decision.fault not in CREATE_AFTER:
            return await transport_fault(decision)  # nothing was made
        if faults.decide(Route.TASK) is not None:  # the model failed: answered 500, not billed
            if decision is not None:  # nothing made: its 500 is the true answer
                faults.note(decision, made=[], applied=False)
            return error(500, "server_error", "The server had an error processing your request.")
        task = completion_task(body, request, spoiled_by(faults))
        await until_done(task)
        if decision is not None:
            faults.note(decision, made=[task.task_id])
            return await transport_fault(decision)  # made and charged, the answer is lost
        content = billed_content(task, body)
        return completion(task.model, content, task.input_tokens, count_tokens(content))

    # --- files -------------------------------------------------------------------------------

    @app.post("/v1/files")
    async def upload_file(request: Request) -> Any:
        upstream.count_request("files")
        if not authorized(request):
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
        return add_file(filename or "upload.jsonl", purpose, content).body()

    @app.get("/v1/files/{file_id}")
    async def get_file(file_id: str, request: Request) -> Any:
        if not authorized(request):
            return denied()
        found = files.get(file_id)
        return found.body() if found else invalid(f"No such File object: {file_id}", 404)

    @app.get("/v1/files/{file_id}/content")
    async def file_content(file_id: str, request: Request) -> Any:
        if not authorized(request):
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

    # --- batches -----------------------------------------------------------------------------

    def finish(batch: SimBatch, status: str) -> None:
        """Write the output and error files of a batch that ended (once)."""
        if status == "failed":  # failed validation: nothing ran, and nothing is billed
            upstream.bill_only(batch.task.task_id, [])
            return
        if batch.output_file_id or batch.error_file_id:
            return
        task = batch.task
        texts = dict(task.posts)
        requests = batch.requests
        ran = len(requests) if status == "completed" else len(requests) // 2  # the first ones
        try:
            items = json.loads(task.output)
        except ValueError:
            items = None
        # Each request's own items, found by post id in one pass (a job may carry thousands
        # of requests and 100 000 items).
        of_post: dict[Any, list[Any]] = {}
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                of_post.setdefault(item.get("id"), []).append(item)
        out, errors = [], []
        for index, (custom_id, post_ids) in enumerate(requests):
            line: dict[str, Any] = {"id": _new_id("batch_req"), "custom_id": custom_id}
            if index >= ran:
                code, message = UNDONE[status]
                errors.append(
                    {**line, "response": None, "error": {"code": code, "message": message}}
                )
            elif custom_id == batch.failed_request:
                body = {
                    "error": {
                        "message": "The server had an error processing your request.",
                        "type": "server_error",
                        "param": None,
                        "code": "server_error",
                    }
                }
                response = {"status_code": 500, "request_id": _new_id("req"), "body": body}
                errors.append({**line, "response": response, "error": None})
            else:
                own = (
                    [item for post_id in post_ids for item in of_post.get(post_id, [])]
                    if isinstance(items, list)
                    else None
                )
                text = task.output if own is None else json.dumps(own, ensure_ascii=False)
                if batch.spoiled_request is not None and batch.spoiled_request[0] == custom_id:
                    text = spoil_output(text, batch.spoiled_request[1], faults.pick).text
                content = _answer_text(text, json_mode=batch.json_mode)
                prompt_tokens = count_tokens(task.prompt) + sum(
                    count_tokens(texts[post_id]) for post_id in post_ids
                )
                response = {
                    "status_code": 200,
                    "request_id": _new_id("req"),
                    "body": completion(task.model, content, prompt_tokens, count_tokens(content)),
                }
                out.append({**line, "response": response, "error": None})
        if out:
            batch.output_file_id = add_file(
                f"{batch.id}_output.jsonl", "batch_output", _jsonl(out), batch.id
            ).id
        if errors:
            batch.error_file_id = add_file(
                f"{batch.id}_error.jsonl", "batch_output", _jsonl(errors), batch.id
            ).id
        batch.counts = {"total": len(requests), "completed": len(out), "failed": len(errors)}
        if status != "completed":  # expired or cancelled: billed for the requests that ran
            upstream.bill_only(task.task_id, [post for _, ids in requests[:ran] for post in ids])
        elif out:  # billed as its answers report their usage
            usages = [line["response"]["body"]["usage"] for line in out]
            upstream.bill_usage(
                task.task_id,
                sum(u["prompt_tokens"] for u in usages),
                sum(u["completion_tokens"] for u in usages),
            )

    def batch_body(batch: SimBatch) -> dict[str, Any]:
        now = time.monotonic()
        status = batch.status(now)
        ended = status in ("completed", "failed", "expired", "cancelled")
        if ended:
            with lock:
                finish(batch, status)
        stamp = int(time.time())
        failed = [
            {"code": "batch_failed", "line": None, "param": None, "message": "The batch failed."}
        ]
        errors = (
            {"object": "list", "data": batch.line_errors or failed} if status == "failed" else None
        )
        # A field that has no value yet is left out, as OpenAI's document describes a batch
        # (its optional fields are not nullable); readers must not count on either.
        body = {
            "id": batch.id,
            "object": "batch",
            "endpoint": ENDPOINT,
            "errors": errors,
            "input_file_id": batch.input_file_id,
            "completion_window": batch.completion_window,
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": batch.created_at,
            "in_progress_at": batch.created_at if status != "validating" else None,
            "expires_at": batch.created_at + 86_400,
            "completed_at": stamp if status == "completed" else None,
            "failed_at": stamp if status == "failed" else None,
            "expired_at": stamp if status == "expired" else None,
            "cancelled_at": stamp if status == "cancelled" else None,
            "request_counts": batch.counts
            or {"total": len(batch.requests), "completed": 0, "failed": 0},
            "metadata": batch.metadata,
        }
        return {name: value for name, value in body.items() if value is not None}

    @app.post("/v1/batches")
    async def create_batch(request: Request) -> Any:
        upstream.count_request("create")
        if not authorized(request):
            return denied()
        body = await request.json()
        if not isinstance(body, dict):
            return invalid("the body must be a JSON object")
        if (problem := create_problem(body, (ENDPOINT,))) is not None:
            return invalid(problem)
        source = files.get(str(body.get("input_file_id")))
        if source is None or source.purpose != "batch":
            return invalid("input_file_id names no uploaded file of purpose batch")
        lines, bad_lines = line_errors(source.content, ENDPOINT)
        if not lines and not bad_lines:
            return invalid("the input file has no requests")
        decision = faults.decide(Route.CREATE)
        if decision is not None and decision.fault in CREATE_REFUSED:
            return refusal(decision, openai=True)
        decision = through_gateway(
            request, faults, decision, lambda: batch_again(source, body, lines, bad_lines)
        )
        if decision is not None and decision.fault not in CREATE_AFTER:
            return await transport_fault(decision)  # nothing was made
        if bad_lines:  # it fails validation: nothing runs, nothing is billed
            rejected = rejected_batch(source, body, bad_lines)
            if decision is not None:  # answered all the same: the fault changes nothing
                faults.note(decision, made=[], batch_id=rejected.id, applied=False)
            return batch_body(rejected)
        batch = new_batch(source, body, lines)
        if decision is not None:
            faults.note(decision, made=[batch.task.task_id], batch_id=batch.id)
            return await transport_fault(decision)  # made and charged, the answer is lost
        return batch_body(batch)

    def batch_again(
        source: SimFile,
        body: dict[str, Any],
        lines: list[dict[str, Any]],
        bad_lines: list[dict[str, Any]],
    ) -> Made:
        """A gateway's extra attempt: another batch of the same file and metadata, charged for
        all its lines (or, failing validation, unbilled)."""
        if bad_lines:
            return Made(batch=rejected_batch(source, body, bad_lines).id)
        batch = new_batch(source, body, lines, faulted=False)
        return Made([batch.task.task_id], batch.id)

    def new_batch(
        source: SimFile, body: dict[str, Any], lines: list[dict[str, Any]], *, faulted: bool = True
    ) -> SimBatch:
        """A batch of these valid lines, made and charged; `faulted=False`: it meets no task or
        output fault."""
        prompt = chat_input(lines[0]["body"]["messages"])[0]
        asked = [
            (str(line["custom_id"]), chat_input(line["body"]["messages"])[1]) for line in lines
        ]
        posts = [post for _, of_request in asked for post in of_request]
        requests = [(custom_id, [pid for pid, _ in of_request]) for custom_id, of_request in asked]
        metadata = {str(k): str(v) for k, v in (body.get("metadata") or {}).items()}
        fate: dict[str, str] = {}
        batch_id = _new_id("batch")

        def decide(task: SimTask) -> None:
            task_fault = faults.decide(Route.TASK, task.task_id, batch_id=batch_id)
            if task_fault is not None:
                fate["fate"] = "failed" if task_fault.fault == "task_failed" else task_fault.fault
            output_fault = faults.decide(Route.OUTPUT, task.task_id, batch_id=batch_id)
            if output_fault is not None and output_fault.fault == "request_error":
                fate["failed_request"] = requests[faults.pick(Route.OUTPUT, len(requests))][0]
                faults.note(output_fault, custom_id=fate["failed_request"])
            elif output_fault is not None and output_fault.fault in WHOLE_OUTPUT:
                # The answer of one request (one line) goes wrong, not every line's.
                fate["spoiled_request"] = requests[faults.pick(Route.OUTPUT, len(requests))][0]
                fate["spoiled_by"] = output_fault.fault
                faults.note(output_fault, custom_id=fate["spoiled_request"])
            elif output_fault is not None:
                task.output = spoil_noted(faults, output_fault, task.output)

        task, _ = upstream.create(
            model=str(lines[0]["body"].get("model", "")),
            prompt=prompt,
            posts=posts,
            idempotency_key=metadata.get("postledger_key"),
            now=time.monotonic(),
            on_new=decide if faulted else None,
            honour_key=False,
        )
        batch = SimBatch(
            id=batch_id,
            task=task,
            input_file_id=source.id,
            completion_window=str(body["completion_window"]),
            metadata=metadata,
            created_at=int(time.time()),
            fate=fate.get("fate", "completed"),
            requests=requests,
            json_mode=_json_mode(lines[0]["body"]),
            failed_request=fate.get("failed_request"),
            spoiled_request=(fate["spoiled_request"], fate["spoiled_by"])
            if "spoiled_request" in fate
            else None,
        )
        with lock:
            batches[batch.id] = batch
        return batch

    def rejected_batch(
        source: SimFile, body: dict[str, Any], bad_lines: list[dict[str, Any]]
    ) -> SimBatch:
        now = time.monotonic()
        unbilled = SimTask(_new_id("task"), None, "", "", [], now, now, "", 0, 0, "invalid input")
        batch = SimBatch(
            id=_new_id("batch"),
            task=unbilled,
            input_file_id=source.id,
            completion_window=str(body["completion_window"]),
            metadata={str(k): str(v) for k, v in (body.get("metadata") or {}).items()},
            created_at=int(time.time()),
            fate="failed",
            line_errors=bad_lines,
        )
        with lock:
            batches[batch.id] = batch
        return batch

    @app.get("/v1/batches")
    async def list_batches(
        request: Request,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        after: str | None = None,
    ) -> Any:
        upstream.count_request("list")
        if not authorized(request):
            return denied()
        decision = faults.decide(Route.LIST, after)
        if (early := await answered_early(decision)) is not None:
            return early
        with lock:
            newest_first = list(reversed(batches.values()))
        if after is not None:
            ids = [b.id for b in newest_first]
            newest_first = newest_first[ids.index(after) + 1 :] if after in ids else []
        page = newest_first[:limit]
        data = [batch_body(b) for b in page]
        ends = {"first_id": data[0]["id"], "last_id": data[-1]["id"]} if data else {}
        listing = {"object": "list", "data": data, **ends, "has_more": len(newest_first) > limit}
        return spoiled_answer(faults, decision, listing)

    @app.get("/v1/batches/{batch_id}")
    async def get_batch(batch_id: str, request: Request) -> Any:
        upstream.count_request("poll", batch_id)
        if not authorized(request):
            return denied()
        decision = faults.decide(Route.POLL, batch_id)
        if (early := await answered_early(decision, refuse=openai_refusal)) is not None:
            return early
        if decision is not None and decision.fault == "forget":
            with lock:
                batches.pop(batch_id, None)
        batch = batches.get(batch_id)
        if batch is None:
            return spoiled_answer(
                faults, decision, invalid(f"No batch found with id '{batch_id}'.", 404)
            )
        return spoiled_answer(faults, decision, batch_body(batch))

    @app.post("/v1/batches/{batch_id}/cancel")
    async def cancel_batch(batch_id: str, request: Request) -> Any:
        if not authorized(request):
            return denied()
        batch = batches.get(batch_id)
        if batch is None:
            return invalid(f"No batch found with id '{batch_id}'.", 404)
        if batch.task.state(time.monotonic()) not in _ENDED and batch.cancel_at is None:
            batch.cancel_at = time.monotonic()
            batch.fate = "cancelled"
        return batch_body(batch)

    return forget_all


def openai_refusal(decision: Decision) -> Response:
    return refusal(decision, openai=True)


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
