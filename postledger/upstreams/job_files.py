"""A Batch API job's two files, kept on disk, never whole in memory.

A job carries up to 200 MB of requests (OpenAI) or 256 MB (Anthropic), and its results file
is as large: held whole as text, bytes, parsed lines and a multipart body, a million-post
month peaked at 3.2 GB. So:

- `RequestFile`: the job's request lines written to an anonymous temporary file as they are
  made (a chunk of batches read from the ledger at a time), then sent from it in blocks;
- `ResultLines`: the results streamed to an anonymous temporary file, indexed by each line's
  id (its offset and length), and a line parsed again only when its batch is settled.

Both files are unlinked the moment they are made: a crash leaves nothing on disk.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, TypeVar

V = TypeVar("V")

# Bytes read from or written to disk at a time.
BLOCK = 1 << 16


class RequestFile:
    """A job's request body on disk: its `size`, and its blocks to send."""

    def __init__(self, parts: Iterable[str]) -> None:
        # Held open by this object, closed by `close` (or with the object).
        self.file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        for part in parts:
            self.file.write(part.encode())
        self.size = self.file.tell()
        self.file.flush()  # a sender may size it by the file's own length
        self.file.seek(0)

    async def blocks(self) -> AsyncIterator[bytes]:
        """The body, from its start, a block at a time (a retried send reads it again)."""
        self.file.seek(0)
        while block := self.file.read(BLOCK):
            yield block

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> RequestFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def json_array_parts(name: str, items: Iterable[str]) -> Iterator[str]:
    """`{"<name>": [item, item, ...]}` in parts, each item already JSON."""
    yield f'{{"{name}": ['
    for nth, item in enumerate(items):
        yield item if nth == 0 else "," + item
    yield "]}"


class ResultLines:
    """A job's result lines (JSON Lines), on disk, by key. A line that is cut or not a JSON
    object is left out: the batch it would have answered has no line yet."""

    def __init__(self, key_of: Callable[[dict[str, Any]], str | None]) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (as RequestFile's)
        self._key_of = key_of
        self._at: dict[str, list[tuple[int, int]]] = {}
        self.count = 0  # lines that are JSON objects, with a key or not

    async def take(self, blocks: AsyncIterator[bytes]) -> None:
        """A results file, appended as it arrives, then indexed."""
        start = self._file.seek(0, 2)
        async for block in blocks:
            self._file.write(block)
        self._file.write(b"\n")  # a file that does not end its last line
        self._index(start)

    def _index(self, start: int) -> None:
        self._file.seek(start)
        offset = start
        for raw in self._file:
            line = _parsed(raw)
            if line is not None:
                self.count += 1
                key = self._key_of(line)
                if key is not None:
                    self._at.setdefault(key, []).append((offset, len(raw)))
            offset += len(raw)

    def ids(self) -> list[str]:
        """The keys of the lines, in the file's order."""
        return list(self._at)

    def lines_of(self, key: str) -> list[dict[str, Any]]:
        """The lines of this key, parsed (none: the file has no line for it)."""
        lines = []
        for offset, length in self._at.get(key, ()):
            self._file.seek(offset)
            line = _parsed(self._file.read(length))
            assert line is not None, "an indexed line parses"
            lines.append(line)
        return lines

    def close(self) -> None:
        self._file.close()


def _parsed(raw: bytes) -> dict[str, Any] | None:
    try:
        line = json.loads(raw)
    except ValueError:
        return None
    return line if isinstance(line, dict) else None


class LinesRead(Mapping[str, V]):
    """Each asked key's value, read from the results file only when it is asked for (one
    batch's line at a time, as the job is settled): `value_of` its lines (none if missing)."""

    def __init__(
        self,
        lines: ResultLines,
        keys: Sequence[str],
        value_of: Callable[[list[dict[str, Any]]], V],
    ) -> None:
        self._lines, self._keys, self._value_of = lines, list(keys), value_of
        self._asked = set(self._keys)

    def __getitem__(self, key: str) -> V:
        if key not in self._asked:
            raise KeyError(key)
        return self._value_of(self._lines.lines_of(key))

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)
