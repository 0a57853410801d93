"""A Batch API job's files on disk (`postledger.upstreams.job_files`): the request body as
written, and the results read back by key, whatever blocks they arrived in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from hypothesis import given
from hypothesis import strategies as st

from postledger.upstreams.job_files import LinesRead, RequestFile, ResultLines, json_array_parts


async def _blocks(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    start = 0
    for cut in sorted({min(max(c, 0), len(data)) for c in cuts}):
        yield data[start:cut]
        start = cut
    yield data[start:]


async def _read_all(file: RequestFile) -> bytes:
    return b"".join([block async for block in file.blocks()])


def _key(line: dict[str, object]) -> str | None:
    key = line.get("custom_id")
    return key if isinstance(key, str) else None


def test_a_request_file_holds_its_parts_and_is_read_again_from_its_start() -> None:
    parts = ['{"custom_id": "b1"}\n', '{"custom_id": "b2", "text": "café ✓"}\n']
    with RequestFile(parts) as file:
        expected = "".join(parts).encode()
        assert file.size == len(expected)
        assert asyncio.run(_read_all(file)) == expected
        assert asyncio.run(_read_all(file)) == expected  # a retried send reads it whole again


def test_a_json_array_body_is_one_json_object() -> None:
    items = [json.dumps({"custom_id": f"b{n}"}) for n in range(3)]
    body = "".join(json_array_parts("requests", items))
    assert json.loads(body) == {
        "requests": [{"custom_id": "b0"}, {"custom_id": "b1"}, {"custom_id": "b2"}]
    }
    assert json.loads("".join(json_array_parts("requests", []))) == {"requests": []}


@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_result_lines_are_found_by_key_whatever_blocks_they_came_in(cuts: list[int]) -> None:
    lines = [
        {"custom_id": "b1", "n": 1},
        {"custom_id": "b2", "n": 2, "text": "naïve ✓"},
        {"custom_id": "b1", "n": 3},  # a second line of a key: both kept, in order
        {"no_id": True},  # a JSON object with no key: counted, not indexed
    ]
    data = "\n".join(json.dumps(line, ensure_ascii=False) for line in lines).encode()
    data += b'\nnot json\n{"custom_id": "b3", "cut'  # a broken line and a cut one
    results = ResultLines(_key)
    asyncio.run(results.take(_blocks(data, cuts)))
    assert results.ids() == ["b1", "b2"]
    assert [line["n"] for line in results.lines_of("b1")] == [1, 3]
    assert results.lines_of("b2") == [lines[1]]
    assert results.lines_of("b3") == []
    assert results.count == 4
    results.close()


def test_two_files_are_read_into_one_index() -> None:
    results = ResultLines(_key)
    asyncio.run(results.take(_blocks(b'{"custom_id": "out"}', [])))  # no newline at its end
    asyncio.run(results.take(_blocks(b'{"custom_id": "err"}\n', [5])))
    assert results.ids() == ["out", "err"]
    assert results.lines_of("err") == [{"custom_id": "err"}]
    results.close()


def test_lines_read_give_each_asked_key_a_value_read_when_asked() -> None:
    results = ResultLines(_key)
    asyncio.run(results.take(_blocks(b'{"custom_id": "b2", "v": 7}\n', [])))
    read = LinesRead(results, ["b1", "b2"], lambda found: [line["v"] for line in found])
    assert list(read) == ["b1", "b2"] and len(read) == 2
    assert dict(read.items()) == {"b1": [], "b2": [7]}
    assert "b3" not in read
    results.close()
