"""The money model's upstream, at the wire: an `httpx.MockTransport` handler that answers the
REAL adapters (`postledger.upstreams`) as the task API, the OpenAI Batch API and Anthropic's
Message Batches would, and keeps its own charge log: what was made, what was billed, and for
which of it a verdict was ever delivered to us. Nothing of postledger is replaced: the trip,
the adapters and the ledger meet HTTP answers.

What each request meets is the model's to say, from the trip's script (`Script`): the true
answer, or a fault of the wire (no connection, an answer lost after the work was made, a 5xx,
a refusal, an HTML page, JSON cut short or of the wrong shape, an odd status, a results file
cut or missing a line, a gateway that retried on its own). Time is the model's too: a look at
work still running moves the trip's clock on, so a trip reaches its deadline in a few looks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.parser import BytesParser
from email.policy import HTTP
from enum import StrEnum
from typing import Any

import httpx

from postledger.defaults import Price
from postledger.guards.estimates import OUTPUT_TOKENS_PER_POST, tokens_of
from postledger.guards.spend import cost_of
from postledger.guards.usage import Usage
from postledger.upstreams.anthropic_batch_match import batch_of_line
from postledger.upstreams.anthropic_protocol import TOOL_NAME
from tests.support.trip_port import FakeClock


class Kind(StrEnum):
    TASK_API = "task_api"
    OPENAI_BATCH = "openai_batch"
    ANTHROPIC_BATCH = "anthropic_batch"


class Outcome(StrEnum):
    """What the upstream made of one request (a job's line), decided once, when it ends."""

    GOOD = "good"  # every item valid
    PARTLY_INVALID = "partly_invalid"  # some items invalid
    UNUSABLE = "unusable"  # the whole output unusable
    FAILED = "failed"  # ended without an output, billed
    NOT_RUN = "not_run"  # never ran (expired; Anthropic: errored): not billed


class Wire(StrEnum):
    """What one request meets on the wire."""

    OK = "ok"
    NOT_SENT = "not_sent"  # no connection: the request never arrived
    LOST = "lost"  # it arrived and was served (the work made), the answer lost: a timeout
    HTTP_503 = "http_503"  # overloaded: not taken
    HTTP_500_AFTER = "http_500_after"  # a create served (the work made), then a 500
    REFUSED_401 = "refused_401"
    REFUSED_429 = "refused_429"
    BAD_REQUEST = "bad_request"  # a create refused with a 400
    HTML = "html"  # a read answered with a 200 captive-portal page
    CUT_JSON = "cut_json"  # a read's JSON cut in half
    WRONG_SHAPE = "wrong_shape"  # a read answered with a JSON list instead of the object
    BAD_STATUS = "bad_status"  # a read's true answer with an undocumented status
    CUT_FILE = "cut_file"  # a results download cut mid-line
    MISSING_LINE = "missing_line"  # a results download lacking its first line
    GATEWAY_RETRIED = "gateway_retried"  # a create made again by a gateway, and reported


CREATE_WIRES = frozenset(
    {
        Wire.OK,
        Wire.NOT_SENT,
        Wire.LOST,
        Wire.HTTP_503,
        Wire.HTTP_500_AFTER,
        Wire.REFUSED_401,
        Wire.REFUSED_429,
        Wire.BAD_REQUEST,
        Wire.GATEWAY_RETRIED,
    }
)
READ_WIRES = frozenset(
    {
        Wire.OK,
        Wire.NOT_SENT,
        Wire.LOST,
        Wire.HTTP_503,
        Wire.REFUSED_401,
        Wire.REFUSED_429,
        Wire.HTML,
        Wire.CUT_JSON,
        Wire.WRONG_SHAPE,
        Wire.BAD_STATUS,
        Wire.CUT_FILE,
        Wire.MISSING_LINE,
    }
)
GATEWAY_RETRIES = 2  # what a GATEWAY_RETRIED create reports, and makes again
# How far one look at work still running moves the clock: a task API's long poll holds its
# `wait`; a Batch API is polled over hours (its deadline is its window, a day and more).
LOOK_TAKES = {"task_api": 1.0, "openai_batch": 3600.0, "anthropic_batch": 3600.0}


class Crash(BaseException):
    """The process dies here: no `finally` of ours runs a write after it (a BaseException
    passes every `except Exception` of the trip, as a kill -9 passes everything)."""


@dataclass
class Line:
    """One request of a job: a ledger batch's posts."""

    batch_id: str
    posts: list[tuple[str, str]]
    outcome: Outcome | None = None  # None: still running
    custom_id: str = ""  # as the create named it (Anthropic: the batch id and a key's token)
    read: bool = False  # its verdict was delivered to us whole, at least once


@dataclass
class Job:
    job_id: str
    key: str  # the Idempotency-Key (task API), the key in its metadata (OpenAI), else ""
    metadata: dict[str, str]
    lines: dict[str, Line]
    forgotten: bool = False  # the upstream lost it: a 404 from now on (its charges stay)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def ended(self) -> bool:
        return all(line.outcome is not None for line in self.lines.values())


@dataclass
class Charge:
    """One request of one job, as the upstream bills it."""

    job_id: str
    batch_id: str
    send: int  # the batch's send (`batches.sends`) when the create carrying it arrived
    post_ids: tuple[str, ...]
    estimate: int  # the ledger's estimate of one send of this request
    cost: int  # what its usage costs; 0 once it never ran
    create_no: int  # the create request that made it
    by_gateway: bool = False  # made by a gateway's own retry, not by postledger's request
    billed: bool = True  # False: it never ran, and the upstream bills nothing for it
    usage_told: bool = False  # its usage was delivered to us (with an answer or a failure)
    answered: bool = False  # the answer to the create that made it reached us


@dataclass
class Script:
    """What a trip's requests meet, in order; past its end, the true answer."""

    creates: list[Wire] = field(default_factory=list)
    reads: list[Wire] = field(default_factory=list)


class ModelUpstream:
    def __init__(
        self,
        kind: Kind,
        *,
        honour_keys: bool,
        price: Price,
        request_text: str,
        clock: FakeClock,
        batch_of_key: Callable[[str], tuple[str, int]],
        sends_of: Callable[[str], int],
        estimate_of: Callable[[list[str]], int | None] | None = None,
    ) -> None:
        """`request_text`: what each request carries besides its posts, as the ledger's
        estimate counts it (the analysis's `request_text`); `batch_of_key`: the ledger batch
        (and its send) a task API key names, from the ledger (a task API request names no
        batch); `sends_of`: a batch's `sends` now; `estimate_of`: what the ledger estimates a
        send of these texts costs now (at the assumed rates if not given)."""
        self.kind, self.honour_keys, self.price = kind, honour_keys, price
        self.request_text = request_text
        self.clock = clock
        self._batch_of_key, self._sends_of = batch_of_key, sends_of
        self._estimate_of = estimate_of
        self.jobs: dict[str, Job] = {}
        self.charges: list[Charge] = []
        # (batch, send) whose create may have made the work, the answer never seen whole: a lost
        # answer, a 5xx after it was made, a crash after it was served. Only there may the
        # ledger keep a possible charge the upstream never billed.
        self.unknowable: set[tuple[str, int]] = set()
        # Sends whose usage reached us, then went with the job before the ledger may have
        # kept it (a crash between the read and the save): booked at their cost or estimate.
        self.cost_unsure: set[tuple[str, int]] = set()
        # Sends a gateway retried on its own, whose answer (the only report of it) a crash may
        # have lost before it was written: its extra charges may be off the books.
        self.gateway_unknown: set[tuple[str, int]] = set()
        self.files: dict[str, list[tuple[str, list[tuple[str, str]]]]] = {}
        self.creates = 0  # create requests that reached us (charged or not)
        self.script = Script()
        self.ends_now: list[Outcome] = []  # a job made now ends at once, its lines so
        self.before_charge: Callable[[Charge], None] | None = None  # the model's invariant
        self.after_request: Callable[[], None] | None = None  # the model's moments
        self._next = 0
        self._made_now: list[Charge] = []
        self._create_lines: list[tuple[str, int]] = []
        self._delivering: list[Line] = []
        self._unknown_told: list[Line] = []

    # --- the model's hand on it ----------------------------------------------------------

    def handler(self, request: httpx.Request) -> httpx.Response:
        self._made_now, self._create_lines = [], []
        self._delivering, self._unknown_told = [], []
        try:
            response = self._answer(request)
        except httpx.TransportError:
            self._unknowable_if_made()
            self._moment()
            raise
        try:
            self._moment()  # a crash here: served, and the answer never arrives
        except Crash:
            self.unknowable.update(self._create_lines)
            raise
        for charge in self._made_now:
            charge.answered = True  # its answer (and a gateway's report) reached us
        self._deliver(self._delivering)  # the verdicts it held reached us whole
        for line in self._unknown_told:
            line.read = True  # "unknown id" is a verdict too; it tells no usage
        return response

    def _answer(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        if method == "POST" and path in ("/v1/tasks", "/v1/batches", "/v1/messages/batches"):
            return self._create(request)
        if method == "POST" and path == "/v1/files":
            return self._upload(request)
        return self._read(request)

    def _moment(self) -> None:
        if self.after_request is not None:
            self.after_request()

    def _unknowable_if_made(self) -> None:
        """A create that may have made its work and whose answer we never saw: the ledger
        cannot know whether it was paid for (it keeps a possible charge)."""
        self.unknowable.update(self._create_lines)

    def end(self, job: Job, outcomes: list[Outcome]) -> None:
        """The job ends upstream, each line as `outcomes` says (cycled)."""
        for index, line in enumerate(job.lines.values()):
            if line.outcome is None:
                line.outcome = outcomes[index % len(outcomes)]
                # Only the Batch APIs say a request never ran (and bill nothing for it); a task
                # API's failed task is taken as billed, as postledger takes it.
                if line.outcome is Outcome.NOT_RUN and self.kind is not Kind.TASK_API:
                    for charge in self.charges_of(job, line):
                        charge.billed, charge.cost = False, 0
                        if charge.by_gateway:  # a job only a gateway knows of: nobody reads
                            self.unknowable.add((charge.batch_id, charge.send))

    def forget(self, job: Job) -> None:
        """The upstream loses the job. A line that ended unbilled and was never read can no
        longer tell the ledger so: whether it was paid for is beyond knowing now. A line read
        whole may have been lost with a crash before its usage was saved: it cannot be read
        again, so the ledger keeps its estimate, or its cost if the save came first."""
        job.forgotten = True
        for line in job.lines.values():
            if line.outcome is None:
                continue
            for charge in self.charges_of(job, line):
                if not line.read and not charge.billed:
                    self.unknowable.add((charge.batch_id, charge.send))
                if line.read and charge.billed and charge.usage_told:
                    self.cost_unsure.add((charge.batch_id, charge.send))

    def running(self) -> list[Job]:
        return [job for job in self.jobs.values() if not job.ended and not job.forgotten]

    def send_of(self, batch_id: str) -> int:
        """The send a create of the batch is now; under a key the upstream honours, every
        send is the first one's attempt again (one possible charge, one task)."""
        return 1 if self.honour_keys else self._sends_of(batch_id)

    def charges_of(self, job: Job, line: Line) -> list[Charge]:
        return [c for c in self.charges if c.job_id == job.job_id and c.batch_id == line.batch_id]

    def charges_per_post(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for charge in self.charges:
            if charge.billed:
                for post_id in charge.post_ids:
                    counts[post_id] = counts.get(post_id, 0) + 1
        return counts

    def _next_wire(self, script: list[Wire], allowed: frozenset[Wire]) -> Wire:
        while script:
            wire = script.pop(0)
            if wire in allowed:
                return wire
        return Wire.OK

    # --- creates ---------------------------------------------------------------------------

    def _create(self, request: httpx.Request) -> httpx.Response:
        wire = self._next_wire(self.script.creates, CREATE_WIRES)
        if wire is Wire.NOT_SENT:
            raise httpx.ConnectError("connection refused (model)", request=request)
        self.creates += 1
        refused = _refusal(wire)
        if refused is not None:
            return refused
        lines, key, metadata = self._request_of(request)
        self._create_lines = [(batch_of_line(b), self.send_of(batch_of_line(b))) for b, _ in lines]
        if wire is Wire.HTTP_503:
            if self.kind is Kind.TASK_API:  # the task API's 503 may follow a made task
                self.unknowable.update(self._create_lines)
            return _error(503, "server_error", "overloaded")
        job = self._make(lines, key, metadata)
        headers: dict[str, str] = {}
        if wire is Wire.GATEWAY_RETRIED:
            for _ in range(GATEWAY_RETRIES):
                self._make(lines, key, metadata, by_gateway=True)
            headers["x-litellm-attempted-retries"] = str(GATEWAY_RETRIES)
        if wire is Wire.LOST:
            raise httpx.ReadTimeout("the answer was lost (model)", request=request)
        if wire is Wire.HTTP_500_AFTER:
            self.unknowable.update(self._create_lines)
            return _error(500, "server_error", "boom")
        if self.kind is Kind.TASK_API:
            return httpx.Response(202, json={"task_id": job.job_id}, headers=headers)
        return httpx.Response(200, json={"id": job.job_id}, headers=headers)

    def _make(
        self,
        named: list[tuple[str, list[tuple[str, str]]]],
        key: str,
        metadata: dict[str, str],
        *,
        by_gateway: bool = False,
    ) -> Job:
        """The job of a create that arrived, charged; a known key honoured is its job, free."""
        if self.kind is Kind.TASK_API and self.honour_keys:
            for known in self.jobs.values():
                if known.key == key:
                    return known
        self._next += 1
        prefix = {Kind.TASK_API: "task", Kind.OPENAI_BATCH: "batch"}.get(self.kind, "msgbatch")
        # Named by what the create called each line (a Message Batch's custom_id carries the
        # submission's token), charged by ledger batch.
        lines = [(batch_of_line(line_id), posts) for line_id, posts in named]
        job = Job(
            f"{prefix}_{self._next:04d}",
            key,
            metadata,
            {
                batch_id: Line(batch_id, posts, custom_id=line_id)
                for (batch_id, posts), (line_id, _) in zip(lines, named, strict=True)
            },
            created_at=self._stamp(),
        )
        for batch_id, posts in lines:
            charge = Charge(
                job.job_id,
                batch_id,
                self.send_of(batch_id),
                tuple(post_id for post_id, _ in posts),
                self._estimate(posts),
                self._cost(posts),
                self.creates,
                by_gateway=by_gateway,
            )
            if self.before_charge is not None:
                self.before_charge(charge)
            self.charges.append(charge)
            self._made_now.append(charge)
        self.jobs[job.job_id] = job
        if self.ends_now and not by_gateway:
            self.end(job, self.ends_now)
        return job

    def _request_of(
        self, request: httpx.Request
    ) -> tuple[list[tuple[str, list[tuple[str, str]]]], str, dict[str, str]]:
        """(lines, key, metadata) of a create: each ledger batch's posts."""
        body = json.loads(request.content)
        if self.kind is Kind.TASK_API:
            posts = [(p["id"], p["text"]) for p in body["posts"]]
            key = request.headers["idempotency-key"]
            return [(self._batch_of_key(key)[0], posts)], key, {}
        if self.kind is Kind.OPENAI_BATCH:
            metadata = {str(k): str(v) for k, v in (body.get("metadata") or {}).items()}
            return self.files[body["input_file_id"]], metadata.get("postledger_key", ""), metadata
        lines = [(r["custom_id"], _posts_of(r["params"]["messages"])) for r in body["requests"]]
        return lines, "", {}

    def _upload(self, request: httpx.Request) -> httpx.Response:
        """An OpenAI input file: free, and never faulted (a fault there costs nothing)."""
        head = f"Content-Type: {request.headers['content-type']}\r\n\r\n".encode()
        message = BytesParser(policy=HTTP).parsebytes(head + request.content)
        content = b""
        for part in message.iter_parts():
            if part.get_param("name", header="content-disposition") == "file":
                payload = part.get_payload(decode=True)
                content = payload if isinstance(payload, bytes) else b""
        lines = []
        for text in content.decode().splitlines():
            line = json.loads(text)
            lines.append((str(line["custom_id"]), _posts_of(line["body"]["messages"])))
        self._next += 1
        file_id = f"file_{self._next:04d}"
        self.files[file_id] = lines
        return httpx.Response(200, json={"id": file_id})

    # --- reads -----------------------------------------------------------------------------

    def _read(self, request: httpx.Request) -> httpx.Response:
        wire = self._next_wire(self.script.reads, READ_WIRES)
        if wire is Wire.NOT_SENT:
            raise httpx.ConnectError("connection refused (model)", request=request)
        if wire is Wire.LOST:
            raise httpx.ReadTimeout("the answer was lost (model)", request=request)
        if wire is Wire.HTTP_503:
            return _error(503, "server_error", "overloaded")
        if (refused := _refusal(wire)) is not None:
            return refused
        if wire is Wire.HTML:
            return httpx.Response(200, text="<html><body>Sign in to continue</body></html>")
        path = request.url.path
        if path == "/v1/batches":
            return self._spoiled(wire, self._listing(request), [])
        if path == "/v1/messages/batches":
            return self._spoiled(wire, self._message_batches(request), [])
        if path.endswith("/content") or path.endswith("/results"):
            return self._results(path, wire)
        job = self.jobs.get(path.rsplit("/", 1)[-1])
        if job is None or job.forgotten:
            if job is not None:  # the upstream's word on it: it does not know it
                self._unknown_told.extend(job.lines.values())
            return _error(404, "not_found_error", "No such task or batch.")
        if not job.ended:
            wait = float(request.url.params.get("wait", "0") or 0)
            self.clock.now += wait + LOOK_TAKES[self.kind]
        body, holds = self._state_of(job)
        return self._spoiled(wire, body, holds)

    def _state_of(self, job: Job) -> tuple[dict[str, Any], list[Line]]:
        """A job's state as its kind answers it, and the lines whose verdict it holds."""
        if self.kind is Kind.TASK_API:
            (line,) = job.lines.values()
            return self._task_body(job, line), [line] if line.outcome is not None else []
        if self.kind is Kind.OPENAI_BATCH:
            body: dict[str, Any] = {"id": job.job_id, "status": "in_progress"}
            if job.ended:
                body = {
                    "id": job.job_id,
                    "status": "completed",
                    "output_file_id": f"{job.job_id}-output",
                    "error_file_id": f"{job.job_id}-errors",
                }
            return body, []
        elsewhere = f"https://elsewhere.example/v1/messages/batches/{job.job_id}/results"
        return {
            "id": job.job_id,
            "processing_status": "ended" if job.ended else "in_progress",
            "results_url": elsewhere if job.ended else None,
        }, []

    def _task_body(self, job: Job, line: Line) -> dict[str, Any]:
        body: dict[str, Any] = {"task_id": job.job_id, "status": "running", "output": None}
        if line.outcome is None:
            return body
        if line.outcome in (Outcome.FAILED, Outcome.NOT_RUN):
            failed = line.outcome is Outcome.FAILED
            usage = self._usage(line.posts) if failed else None
            return {**body, "status": "failed", "error": "the model failed", "usage": usage}
        return {
            **body,
            "status": "succeeded",
            "output": json.dumps(self._items(line)),
            "usage": self._usage(line.posts),
        }

    def _stamp(self) -> datetime:
        """A new job's `created_at`: now, strictly after the job made before it."""
        now = datetime.now(UTC)
        last = next(reversed(self.jobs.values()), None) if self.jobs else None
        if last is not None and now <= last.created_at:
            now = last.created_at + timedelta(microseconds=1)
        return now

    def _message_batches(self, request: httpx.Request) -> dict[str, Any]:
        """`GET /v1/messages/batches` as Anthropic lists them: newest first, `after_id` pages
        to the older ones; each batch with its time, its status and its request counts."""
        newest_first = [j for j in reversed(self.jobs.values()) if not j.forgotten]
        after = request.url.params.get("after_id")
        if after is not None:
            ids = [j.job_id for j in newest_first]
            newest_first = newest_first[ids.index(after) + 1 :] if after in ids else []
        limit = int(request.url.params.get("limit", "20"))
        page = newest_first[:limit]
        data = [
            {
                "id": job.job_id,
                "type": "message_batch",
                "created_at": job.created_at.isoformat().replace("+00:00", "Z"),
                "processing_status": "ended" if job.ended else "in_progress",
                "request_counts": _request_counts(job),
            }
            for job in page
        ]
        first, last = (page[0].job_id, page[-1].job_id) if page else (None, None)
        more = len(newest_first) > limit
        return {"data": data, "has_more": more, "first_id": first, "last_id": last}

    def _listing(self, request: httpx.Request) -> dict[str, Any]:
        newest_first = [j for j in reversed(self.jobs.values()) if not j.forgotten]
        after = request.url.params.get("after")
        if after is not None:
            ids = [j.job_id for j in newest_first]
            newest_first = newest_first[ids.index(after) + 1 :] if after in ids else []
        limit = int(request.url.params.get("limit", "20"))
        data = [{"id": j.job_id, "metadata": j.metadata} for j in newest_first[:limit]]
        return {"object": "list", "data": data, "has_more": len(newest_first) > limit}

    def _results(self, path: str, wire: Wire) -> httpx.Response:
        """A job's results, one line per request (OpenAI: the answers in its output file,
        the rest in its error file). A line delivered whole is a verdict read."""
        job = self.jobs.get(path.split("/")[-2].removesuffix("-output").removesuffix("-errors"))
        if job is None or job.forgotten:
            return _error(404, "not_found_error", "No such file.")
        errors_file = path.endswith("-errors/content")
        chosen = [
            line
            for line in job.lines.values()
            if self.kind is not Kind.OPENAI_BATCH
            or (line.outcome in (Outcome.FAILED, Outcome.NOT_RUN)) == errors_file
        ]
        texts = [json.dumps(self._result_line(line)) for line in chosen]
        if wire is Wire.MISSING_LINE and chosen:
            texts, chosen = texts[1:], chosen[1:]
        content = "".join(text + "\n" for text in texts)
        if wire is Wire.CUT_FILE and chosen:
            content, chosen = content[: len(content) - len(texts[-1]) // 2 - 1], chosen[:-1]
        self._delivered(chosen)
        return httpx.Response(200, content=content.encode())

    def _result_line(self, line: Line) -> dict[str, Any]:
        outcome, usage = line.outcome, self._usage(line.posts)
        if self.kind is Kind.OPENAI_BATCH:
            if outcome is Outcome.NOT_RUN:
                error = {"code": "batch_expired", "message": "expired before it ran"}
                return {
                    "custom_id": line.custom_id or line.batch_id,
                    "response": None,
                    "error": error,
                }
            if outcome is Outcome.FAILED:  # an errored request: no usage reported
                response = {"status_code": 500, "body": {"error": {"code": "server_error"}}}
                return {
                    "custom_id": line.custom_id or line.batch_id,
                    "response": response,
                    "error": None,
                }
            completion = {
                "choices": [{"message": {"content": json.dumps({"results": self._items(line)})}}],
                "usage": {
                    "prompt_tokens": usage["input_tokens"],
                    "completion_tokens": usage["output_tokens"],
                },
            }
            response = {"status_code": 200, "body": completion}
            return {
                "custom_id": line.custom_id or line.batch_id,
                "response": response,
                "error": None,
            }
        if outcome is Outcome.NOT_RUN:
            return {"custom_id": line.custom_id or line.batch_id, "result": {"type": "expired"}}
        content: list[dict[str, Any]] = []
        if outcome is not Outcome.FAILED:  # FAILED: a message with no answer in it, billed
            answer = {"results": self._items(line)}
            content = [{"type": "tool_use", "name": TOOL_NAME, "input": answer}]
        message = {"content": content, "stop_reason": "max_tokens", "usage": usage}
        return {
            "custom_id": line.custom_id or line.batch_id,
            "result": {"type": "succeeded", "message": message},
        }

    def _spoiled(self, wire: Wire, body: dict[str, Any], holds: list[Line]) -> httpx.Response:
        """A read's JSON answer as the wire leaves it: a spoiled one delivers no verdict."""
        if wire is Wire.CUT_JSON:
            text = json.dumps(body)
            return httpx.Response(200, content=text[: len(text) // 2].encode())
        if wire is Wire.WRONG_SHAPE:
            return httpx.Response(200, json=[body])
        if wire is Wire.BAD_STATUS:
            status = "processing_status" if self.kind is Kind.ANTHROPIC_BATCH else "status"
            return httpx.Response(200, json={**body, status: "paused"})
        self._delivered(holds)
        return httpx.Response(200, json=body)

    def _delivered(self, lines: list[Line]) -> None:
        """These lines' verdicts go out whole: read once the answer reaches us."""
        self._delivering.extend(lines)

    def _deliver(self, lines: list[Line]) -> None:
        """These lines' verdicts reached us whole: read, and the usage they report told."""
        for line in lines:
            line.read = True
            tells_usage = line.outcome not in (None, Outcome.NOT_RUN) and not (
                self.kind is Kind.OPENAI_BATCH and line.outcome is Outcome.FAILED
            )
            job = next(j for j in self.jobs.values() if line in j.lines.values())
            for charge in self.charges_of(job, line):
                charge.usage_told = charge.usage_told or tells_usage

    # --- what things cost --------------------------------------------------------------------

    def _usage(self, posts: list[tuple[str, str]]) -> dict[str, int]:
        """Input as the ledger's estimate counts it; output half its typical answer, so that
        a cost never exceeds its estimate (the budget's checks rest on that)."""
        tokens = tokens_of(len(self.request_text)) + sum(tokens_of(len(t)) for _, t in posts)
        return {"input_tokens": tokens, "output_tokens": OUTPUT_TOKENS_PER_POST * len(posts) // 2}

    def _cost(self, posts: list[tuple[str, str]]) -> int:
        usage = self._usage(posts)
        return cost_of(self.price, Usage(usage["input_tokens"], usage["output_tokens"]))

    def _estimate(self, posts: list[tuple[str, str]]) -> int:
        if self._estimate_of is not None:
            return self._estimate_of([text for _, text in posts]) or 0
        tokens = tokens_of(len(self.request_text)) + sum(tokens_of(len(t)) for _, t in posts)
        return cost_of(self.price, Usage(tokens, OUTPUT_TOKENS_PER_POST * len(posts)))

    def _items(self, line: Line) -> Any:
        if line.outcome is Outcome.UNUSABLE:
            return "I am sorry, I cannot classify these posts today."
        return [
            {
                "id": post_id,
                "category": "bogus"
                if line.outcome is Outcome.PARTLY_INVALID and index % 2 == 0
                else "question",
                "sentiment": "neutral",
                "summary": f"A post ({post_id}).",
            }
            for index, (post_id, _) in enumerate(line.posts)
        ]


def _posts_of(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The posts of a chat or Messages request: its user message, `{"posts": [...]}`."""
    user = next(m for m in reversed(messages) if m.get("role") == "user")
    return [(str(p["id"]), str(p["text"])) for p in json.loads(user["content"])["posts"]]


def _refusal(wire: Wire) -> httpx.Response | None:
    if wire is Wire.REFUSED_401:
        return _error(401, "invalid_request_error", "Incorrect API key.", "invalid_api_key")
    if wire is Wire.REFUSED_429:
        return _error(429, "requests", "Rate limit reached.", "rate_limit_exceeded", retry=1)
    if wire is Wire.BAD_REQUEST:
        return _error(400, "invalid_request_error", "bad request")
    return None


def _error(
    status: int, kind: str, message: str, code: str | None = None, *, retry: int | None = None
) -> httpx.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}
    headers = {"retry-after": str(retry)} if retry is not None else {}
    return httpx.Response(status, json=body, headers=headers)


def _request_counts(job: Job) -> dict[str, int]:
    """A Message Batch's `request_counts`: every request processing until the whole batch
    has ended, as Anthropic counts them."""
    if not job.ended:
        return {
            "processing": len(job.lines),
            "succeeded": 0,
            "errored": 0,
            "canceled": 0,
            "expired": 0,
        }
    ran = sum(1 for line in job.lines.values() if line.outcome is not Outcome.NOT_RUN)
    expired = len(job.lines) - ran
    return {"processing": 0, "succeeded": ran, "errored": 0, "canceled": 0, "expired": expired}
