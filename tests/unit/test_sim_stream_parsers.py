"""The simulator's parsers of a body read as it arrives (`simulator.multipart` for POST
/v1/files, `simulator.json_items` for a Message Batches create) read what the whole body,
parsed at once, read: the same parts, the same requests, the same refusals, however the body
is cut into chunks."""

from __future__ import annotations

import json
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.json_items import ListItems
from simulator.multipart import FormReader
from simulator.spool import Spool

KEPT = frozenset({"file", "purpose"})


def whole_form(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The form as the simulator read it when it parsed the whole body with the email parser."""
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw
    )
    parts: dict[str, tuple[str | None, bytes]] = {}
    if not message.is_multipart():
        return parts
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if name and str(name) in KEPT:
            parts[str(name)] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return parts


def streamed_form(
    content_type: str, raw: bytes, cuts: list[int], folder: Path
) -> dict[str, tuple[str | None, bytes]]:
    reader = FormReader(content_type, Spool(folder), KEPT, frozenset({"file"}))
    at = 0
    for cut in sorted({*cuts, len(raw)}):
        reader.feed(raw[at:cut])
        at = cut
    parts = reader.close()
    read = {
        name: (part.filename, part.path.read_bytes() if part.path else part.value)
        for name, part in parts.items()
    }
    reader.discard()
    assert not list(folder.iterdir()), "every file written was taken or removed"
    return read


def httpx_form(files: Any, data: dict[str, str]) -> tuple[str, bytes]:
    """A body as the clients of this API (httpx, the openai SDK) send it."""
    request = httpx.Request("POST", "http://sim/v1/files", files=files, data=data)
    return request.headers["content-type"], request.read()


RAW_FORMS = [
    # A boundary-like line that is data, a base64 part, bare LF line breaks, a body cut short,
    # blanks after a boundary, a preamble, RFC 2231 names, a filename from Content-Type.
    b'--xx\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--xx\r\n'
    b'Content-Disposition: form-data; name="file"; filename="z.jsonl"\r\n\r\nabc\r\n'
    b"--xxyz\r\ndef\r\n--xx--\r\n",
    b'preamble\r\n--xx\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--xx  '
    b'\r\nContent-Disposition: form-data; name="file"; filename="z.jsonl"\r\n'
    b"Content-Transfer-Encoding: base64\r\n\r\naGVsbG8K\r\n--xx--",
    b'--xx\nContent-Disposition: form-data; name="purpose"\n\nbatch\n--xx\n'
    b'Content-Disposition: form-data; name="file"; filename="z.jsonl"\n\n\n--xx--\n',
    b'--xx\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--xx\r\n'
    b"Content-Disposition: form-data; name*=UTF-8''file; filename*=UTF-8''%C3%A9.jsonl\r\n"
    b"\r\nabc\r\n--xx--\r\n",
    b'--xx\r\nContent-Disposition: form-data; name="file"\r\n'
    b'Content-Type: text/plain; name="n.jsonl"\r\n\r\na\r\n\r\n--xx\r\n--xx--\r\n',
    b'--xx\r\nContent-Disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\nfirst\r\n'
    b'--xx\r\nContent-Disposition: form-data; name="file"; filename="b.jsonl"\r\n\r\n'
    b"second\r\n--xx--\r\n",
]


@pytest.mark.parametrize("raw", RAW_FORMS)
@pytest.mark.parametrize("chunk", [1, 2, 7, 4096])
def test_a_form_is_read_as_the_email_parser_read_it(raw: bytes, chunk: int, tmp_path: Path) -> None:
    content_type = "multipart/form-data; boundary=xx"
    cuts = list(range(chunk, len(raw), chunk))
    assert streamed_form(content_type, raw, cuts, tmp_path) == whole_form(content_type, raw)


@pytest.mark.parametrize("content_type", ["", "application/json", "multipart/form-data"])
def test_a_body_that_is_no_form_with_a_boundary_has_no_parts(
    content_type: str, tmp_path: Path
) -> None:
    raw = RAW_FORMS[0]
    assert streamed_form(content_type, raw, [3], tmp_path) == whole_form(content_type, raw) == {}


@settings(max_examples=60, deadline=None)
@given(
    content=st.binary(max_size=3000),
    filename=st.sampled_from(["in.jsonl", "in.txt", "é.jsonl"]),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
)
def test_an_upload_as_clients_send_it_comes_through_byte_for_byte(
    content: bytes, filename: str, cuts: list[int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    content_type, raw = httpx_form({"file": (filename, content)}, {"purpose": "batch"})
    folder = tmp_path_factory.mktemp("spool")
    read = streamed_form(content_type, raw, cuts, folder)
    assert read == whole_form(content_type, raw)
    assert read["file"] == (filename, content)


def whole_requests(raw: bytes) -> tuple[bool, list[Any]]:
    """(whether the body was an object whose `requests` is a list, its items), as
    `json.loads` of the whole body gives them."""
    try:
        body = json.loads(raw)
    except ValueError:
        return False, []
    if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
        return False, []
    return True, body["requests"]


def streamed_requests(raw: bytes, cuts: list[int]) -> tuple[bool, list[Any]]:
    items: list[Any] = []
    reader = ListItems("requests", items.clear, items.append)
    at = 0
    for cut in sorted({*cuts, len(raw)}):
        reader.feed(raw[at:cut])
        at = cut
    listed = reader.close()
    return listed, items if listed else []


REQUEST = {"custom_id": "r1", "params": {"model": "m", "max_tokens": 5, "note": "é \u2028 😍"}}
RAW_BODIES = [
    b"",
    b"{",
    b"[]",
    b'"requests"',
    b'{"requests": []}',
    b'{"requests": {}}',
    b'{"other": 1}',
    b'{"requests": [1, 2.5, -3e2, true, null, "x", [1]]}',
    b'{"requests": [1.5e3]  ,  "more": {"a": [1, {"b": "c"}]}}',
    json.dumps({"requests": [REQUEST, REQUEST]}).encode(),
    json.dumps({"requests": [REQUEST]}).encode() + b" x",
    json.dumps({"requests": [REQUEST]}).encode() + b"  \n",
    b'{"requests": [{"a": 1}], "requests": [2, 3]}',
    b'{"requests": [2, 3], "requests": 5}',
    b'{"requests": [1],}',
    b'{"requests": [1,]}',
    b'{"requests": [1] } }',
    b'{"requests": [1, NaN, Infinity, -Infinity]}',
    b'{"requests": ["bad\xff"]}',
    b'{"requests": ["\\ud800 lone"]}',
    b"\xef\xbb\xbf" + json.dumps({"requests": [REQUEST]}).encode(),
    json.dumps({"requests": [REQUEST]}).encode("utf-16"),
    json.dumps({"requests": [REQUEST]}).encode("utf-32-le"),
    b'{"requests": [{"unterminated": "abc}]}',
    b'{"requests": [123',
    b'\t{ "requests" : [ 1 , 2 ] }\r\n',
]


@pytest.mark.parametrize("raw", RAW_BODIES)
@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_a_create_body_is_read_as_json_loads_read_it(raw: bytes, chunk: int) -> None:
    cuts = list(range(chunk, len(raw), chunk))
    assert streamed_requests(raw, cuts) == whole_requests(raw)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None)
@given(
    body=st.dictionaries(st.sampled_from(["requests", "a", "b"]), JSON_VALUES, max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
    indent=st.sampled_from([None, 1]),
)
def test_any_json_body_is_read_alike(
    body: dict[str, Any], cuts: list[int], indent: int | None
) -> None:
    raw = json.dumps(body, indent=indent, ensure_ascii=False).encode()
    assert streamed_requests(raw, cuts) == whole_requests(raw)


def test_a_file_past_its_limit_is_counted_whole_and_not_written_on(tmp_path: Path) -> None:
    """An upload over the limit is refused for its size: the part is counted to its end, but
    what is written stops a chunk past the limit."""
    content_type, raw = httpx_form({"file": ("in.jsonl", b"x" * 10_000)}, {"purpose": "b"})
    reader = FormReader(content_type, Spool(tmp_path), KEPT, frozenset({"file"}), most=100)
    for at in range(0, len(raw), 64):
        reader.feed(raw[at : at + 64])
    file = reader.close()["file"]
    assert file.size == 10_000
    assert file.path is not None and 100 <= file.path.stat().st_size <= 100 + 64
