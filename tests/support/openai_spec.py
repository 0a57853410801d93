"""A loopback proxy that checks what passes between an OpenAI adapter and the simulator against
OpenAI's own OpenAPI document (`tests/data/openai_openapi/`, a cut of openai/openai-openapi; its
SOURCE.md says which revision): every request the adapter sends, every response the simulator
returns, and in a Batch API file every line's chat request body and chat response body.

    with checked_by_openai_spec(simulator_root) as proxy:
        # point the adapter at f"{proxy.url}/v1", run a month
        assert proxy.problems == []

The checks run with openapi-core (requests and responses, through its werkzeug binding) and its
JSON Schema validator (a file's lines). Nothing is changed on the way through.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from openapi_core import Config, OpenAPI
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
from openapi_schema_validator import OAS31Validator
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

DOCUMENT = Path(__file__).parent.parent / "data" / "openai_openapi" / "openapi.json"
# Hop-by-hop, or describing a body httpx has already decoded.
_NOT_FORWARDED = {"host", "content-length", "transfer-encoding", "connection", "content-encoding"}
_FILE_CONTENT = re.compile(r"^/v1/files/[^/]+/content$")


@dataclass
class SpecProxy:
    """What the proxy saw: `operations` counts `METHOD /path` (ids shown as `{id}`), `lines`
    the Batch API file lines checked, `problems` says what broke the document, one per case."""

    url: str
    operations: Counter[str] = field(default_factory=Counter)
    lines: int = 0
    problems: list[str] = field(default_factory=list)


def _document(server: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    document["servers"] = [{"url": f"{server}/v1"}]  # where the adapter sends it: here
    _map_discriminators(document, document)
    _any_bytes_for_binary(document)
    # A file's content is its bytes (JSONL for a batch's files). The document calls it
    # `application/json` with a string schema, which no JSONL body is: any bytes pass here,
    # and `_Checker` checks the lines one by one.
    content = document["paths"]["/files/{file_id}/content"]["get"]["responses"]["200"]
    content["content"] = {"application/octet-stream": {"schema": {}}}
    return document


def _any_bytes_for_binary(document: dict[str, Any]) -> None:
    """A file part is written `type: string, format: binary`, as OpenAPI 3.0 wrote it; in the
    3.1 document that means a text string, and openapi-core hands the part over as bytes. A
    binary part takes any bytes."""
    for schema in document["components"]["schemas"].values():
        for prop in (schema.get("properties") or {}).values():
            if isinstance(prop, dict) and prop.get("format") == "binary":
                prop.pop("type", None)


def _map_discriminators(document: dict[str, Any], node: Any) -> None:
    """OpenAI's discriminators give no `mapping`: OpenAPI then maps a value to the schema of
    that name (`#/components/schemas/json_schema`), which the document does not have. Each
    member of the `oneOf` says its own value (the one `enum` of the discriminating property):
    that is the mapping the document means, written out."""
    if isinstance(node, list):
        for value in node:
            _map_discriminators(document, value)
        return
    if not isinstance(node, dict):
        return
    discriminator = node.get("discriminator")
    if isinstance(discriminator, dict) and "mapping" not in discriminator:
        mapping = {}
        for member in node.get("oneOf") or node.get("anyOf") or []:
            ref = member.get("$ref", "")
            schema = document["components"]["schemas"][ref.rsplit("/", 1)[-1]]
            values = schema["properties"][discriminator["propertyName"]].get("enum", [])
            mapping.update({value: ref for value in values})
        discriminator["mapping"] = mapping
    for value in node.values():
        _map_discriminators(document, value)


def _why(exc: Exception) -> str:
    """openapi-core's error, with the schema errors it carries (that say which field)."""
    reasons = [str(exc)]
    cause: BaseException | None = exc
    while cause is not None:
        reasons += [str(error.message) for error in getattr(cause, "schema_errors", ())]
        cause = cause.__cause__
    return "; ".join(dict.fromkeys(reasons))


class _Checker:
    def __init__(self, document: dict[str, Any], proxy: SpecProxy) -> None:
        # The document is taken as OpenAI publishes it: it does not pass openapi-spec-validator
        # itself (a `default: null` on an object field), which checks the document, not us.
        self.openapi = OpenAPI.from_dict(document, config=Config(spec_validator_cls=None))
        self.proxy = proxy
        self.lock = threading.Lock()
        self.schemas = {
            name: OAS31Validator(
                {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
            )
            for name in ("CreateChatCompletionRequest", "CreateChatCompletionResponse")
        }

    def exchange(self, request: Request, response: Response) -> None:
        shown = f"{request.method} {re.sub(r'/(file|batch)[-_][^/]+', '/{id}', request.path)}"
        problems = []
        wrapped = WerkzeugOpenAPIRequest(request)
        try:
            self.openapi.validate_request(wrapped)
        except Exception as exc:  # openapi-core's errors share no base worth naming here
            problems.append(f"{shown}: request: {_why(exc)}")
        try:
            self.openapi.validate_response(wrapped, WerkzeugOpenAPIResponse(response))
        except Exception as exc:
            problems.append(f"{shown}: response {response.status_code}: {_why(exc)}")
        lines = 0
        if request.method == "POST" and request.path == "/v1/files" and "file" in request.files:
            content = request.files["file"].stream.read()
            lines += self._lines(shown, content, ("body",), "CreateChatCompletionRequest", problems)
        if (
            request.method == "GET"
            and _FILE_CONTENT.match(request.path)
            and response.status_code == 200
        ):
            lines += self._lines(
                shown,
                response.get_data(),
                ("response", "body"),
                "CreateChatCompletionResponse",
                problems,
                only_if=lambda line: (line.get("response") or {}).get("status_code") == 200,
            )
        with self.lock:
            self.proxy.operations[shown] += 1
            self.proxy.lines += lines
            self.proxy.problems += problems

    def _lines(
        self,
        shown: str,
        content: bytes,
        where: Iterable[str],
        schema: str,
        problems: list[str],
        only_if: Callable[[dict[str, Any]], bool] | None = None,
    ) -> int:
        checked = 0
        for number, text in enumerate(content.decode("utf-8").splitlines(), 1):
            if not text.strip():
                continue
            line = json.loads(text)
            if only_if is not None and not only_if(line):
                continue
            body = line
            for key in where:
                body = body.get(key) if isinstance(body, dict) else None
            errors = [e.message for e in self.schemas[schema].iter_errors(body)]
            if errors:
                problems.append(f"{shown}: line {number}: not a {schema}: {'; '.join(errors)}")
            checked += 1
        return checked


@contextmanager
def checked_by_openai_spec(upstream: str) -> Iterator[SpecProxy]:
    """A proxy on a free loopback port in front of `upstream` (the simulator's root URL)."""
    forward = httpx.Client(base_url=upstream, timeout=60)
    checker: _Checker | None = None

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        body = request.get_data(cache=True)
        answer = forward.request(
            request.method,
            request.full_path.removesuffix("?"),
            content=body,
            headers=[(k, v) for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED],
        )
        response = Response(
            answer.content,
            status=answer.status_code,
            headers=[(k, v) for k, v in answer.headers.items() if k.lower() not in _NOT_FORWARDED],
        )
        assert checker is not None
        checker.exchange(request, response)
        return response(environ, start_response)

    server = make_server("127.0.0.1", 0, app, threaded=True)
    proxy = SpecProxy(url=f"http://127.0.0.1:{server.server_port}")
    checker = _Checker(_document(proxy.url), proxy)
    serving = threading.Thread(target=server.serve_forever, name="openai-spec-proxy", daemon=True)
    serving.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        serving.join(10)
        forward.close()
