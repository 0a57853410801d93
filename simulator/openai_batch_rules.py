"""What the OpenAI Batch API refuses, so that the simulator refuses it too: an adapter
regression that writes a request the real service rejects must fail a test here.

Three moments, as on the real service:
- the upload (`POST /v1/files`, purpose `batch`): the file must be `.jsonl`, at most 200 MB;
- the create (`POST /v1/batches`), answered 400 at once: `completion_window` other than `24h`,
  an endpoint that is not simulated, metadata beyond 16 pairs, 64-character keys or
  512-character string values;
- the validation of the input file, after the create: the batch ends `failed` with one error
  per bad line in `errors.data` (`line` is 1-based), and nothing is billed: a line that is not
  JSON or lacks `custom_id`, `method`, `url` or `body`; a duplicate `custom_id`; a `method`
  other than POST or a `url` other than the batch's endpoint; a model other than the first
  line's (one model per file); `stream: true`; more than 50 000 lines.

Limits and wording follow OpenAI's documentation (the batch guide and the API reference); the
error codes are the simulator's own where the documentation names none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from simulator.spool import lines_of

MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_REQUESTS = 50_000
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
COMPLETION_WINDOWS = ("24h",)


def upload_problem(filename: str, size: int) -> str | None:
    """Why a batch input file upload is refused (a 400), or None."""
    if not filename.endswith(".jsonl"):
        return f"Invalid file format for Batch API: {filename!r}. Must be .jsonl"
    if size > MAX_FILE_BYTES:
        return f"File is {size} bytes: batch input files may be at most 200 MB"
    return None


def create_problem(body: dict[str, Any], endpoints: tuple[str, ...]) -> str | None:
    """Why `POST /v1/batches` is refused at once (a 400), or None."""
    window = body.get("completion_window")
    if window not in COMPLETION_WINDOWS:
        return (
            f"Invalid value for 'completion_window': {window!r}. Supported values are: "
            + ", ".join(repr(w) for w in COMPLETION_WINDOWS)
            + "."
        )
    if body.get("endpoint") not in endpoints:
        return f"Invalid value for 'endpoint': {body.get('endpoint')!r}; simulated: {endpoints}"
    return metadata_problem(body.get("metadata"))


def metadata_problem(metadata: Any) -> str | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        return "Invalid 'metadata': expected an object of string keys and string values."
    if len(metadata) > MAX_METADATA_PAIRS:
        return (
            "Invalid 'metadata': too many properties. Expected an object with at most "
            f"{MAX_METADATA_PAIRS} properties, but got {len(metadata)} instead."
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY:
            return (
                f"Invalid 'metadata': key {key[:20]!r}… is {len(key)} characters, "
                f"at most {MAX_METADATA_KEY} are allowed."
            )
        if not isinstance(value, str):
            return f"Invalid 'metadata.{key}': expected a string, got {type(value).__name__}."
        if len(value) > MAX_METADATA_VALUE:
            return (
                f"Invalid 'metadata.{key}': the value is {len(value)} characters, "
                f"at most {MAX_METADATA_VALUE} are allowed."
            )
    return None


def input_lines(path: Path) -> Iterator[str]:
    """The lines of an input file, read one at a time: its non-blank lines as the whole file,
    decoded (bad UTF-8 replaced), then split at any line boundary `str.splitlines` knows, gave
    them. (A `\\n` never ends a multi-byte character: decoding line by line decodes alike.)"""
    for raw in lines_of(path):
        for text in raw.decode("utf-8", "replace").splitlines():
            if text.strip():
                yield text


def too_many(count: int) -> dict[str, Any] | None:
    """The one error of an input file of more lines than a batch takes, or None."""
    if count <= MAX_REQUESTS:
        return None
    message = f"The file has {count} requests; at most 50 000."
    return {"code": "too_many_requests", "message": message, "param": None, "line": 0}


class LineChecker:
    """The lines of an input file checked one by one, in order (`check`): the errors found so
    far, one per bad line as the batch's `errors.data` lists them. Any error fails the whole
    batch."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.errors: list[dict[str, Any]] = []
        self._seen: set[str] = set()
        self._model: Any = None

    def _bad(self, line: int, code: str, message: str, param: str | None = None) -> None:
        self.errors.append({"code": code, "message": message, "param": param, "line": line})

    def check(self, number: int, text: str) -> dict[str, Any] | None:
        """The request of line `number` (1-based), or None for a line that is none; a request
        with another fault (its custom_id used before, its endpoint, model or streaming) is
        returned, its error noted."""
        try:
            request = json.loads(text)
        except ValueError:
            self._bad(number, "invalid_json_line", "This line is not parseable as valid JSON.")
            return None
        if not isinstance(request, dict) or not isinstance(request.get("body"), dict):
            self._bad(
                number,
                "missing_required_parameter",
                "Each line needs custom_id, method, url, body.",
            )
            return None
        missing = [name for name in ("custom_id", "method", "url") if not request.get(name)]
        if missing:
            self._bad(number, "missing_required_parameter", f"Missing {missing[0]}.", missing[0])
            return None
        custom_id, body = str(request["custom_id"]), request["body"]
        if custom_id in self._seen:
            self._bad(
                number,
                "duplicate_custom_id",
                "The custom_id for this request is a duplicate of another request. The "
                "custom_id parameter must be unique for each request in a batch.",
                "custom_id",
            )
        self._seen.add(custom_id)
        if request["method"] != "POST" or request["url"] != self.endpoint:
            self._bad(
                number,
                "mismatched_endpoint",
                f"This line's {request['method']} {request['url']} does not match the "
                f"batch's endpoint POST {self.endpoint}.",
                "url",
            )
        # The first model named so far (a line that names none does not set it).
        model = self._model = self._model if self._model is not None else body.get("model")
        if body.get("model") != model:
            self._bad(
                number,
                "mismatched_model",
                f"The model {body.get('model')!r} differs from {model!r} of the first line: "
                "all requests in a batch must use the same model.",
                "body.model",
            )
        if body.get("stream"):
            self._bad(
                number, "invalid_request", "Streaming is not supported in batch.", "body.stream"
            )
        return request
