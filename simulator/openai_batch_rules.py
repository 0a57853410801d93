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
from typing import Any

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


def line_errors(content: bytes, endpoint: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(requests, errors) of an input file: the parsed lines, and one error per bad line as
    the batch's `errors.data` lists them. Any error fails the whole batch."""
    requests: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    model: str | None = None

    def bad(line: int, code: str, message: str, param: str | None = None) -> None:
        errors.append({"code": code, "message": message, "param": param, "line": line})

    lines = [text for text in content.decode("utf-8", "replace").splitlines() if text.strip()]
    if len(lines) > MAX_REQUESTS:
        bad(0, "too_many_requests", f"The file has {len(lines)} requests; at most 50 000.")
        return [], errors
    for number, text in enumerate(lines, start=1):
        try:
            request = json.loads(text)
        except ValueError:
            bad(number, "invalid_json_line", "This line is not parseable as valid JSON.")
            continue
        if not isinstance(request, dict) or not isinstance(request.get("body"), dict):
            bad(
                number,
                "missing_required_parameter",
                "Each line needs custom_id, method, url, body.",
            )
            continue
        missing = [name for name in ("custom_id", "method", "url") if not request.get(name)]
        if missing:
            bad(number, "missing_required_parameter", f"Missing {missing[0]}.", missing[0])
            continue
        custom_id, body = str(request["custom_id"]), request["body"]
        if custom_id in seen:
            bad(
                number,
                "duplicate_custom_id",
                "The custom_id for this request is a duplicate of another request. The "
                "custom_id parameter must be unique for each request in a batch.",
                "custom_id",
            )
        seen.add(custom_id)
        if request["method"] != "POST" or request["url"] != endpoint:
            bad(
                number,
                "mismatched_endpoint",
                f"This line's {request['method']} {request['url']} does not match the "
                f"batch's endpoint POST {endpoint}.",
                "url",
            )
        model = model if model is not None else body.get("model")
        if body.get("model") != model:
            bad(
                number,
                "mismatched_model",
                f"The model {body.get('model')!r} differs from {model!r} of the first line: "
                "all requests in a batch must use the same model.",
                "body.model",
            )
        if body.get("stream"):
            bad(number, "invalid_request", "Streaming is not supported in batch.", "body.stream")
        requests.append(request)
    return requests, errors
