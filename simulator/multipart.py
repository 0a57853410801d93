"""A multipart/form-data body (POST /v1/files) read as it arrives: a file part goes to disk
chunk by chunk, so a 200 MB upload never sits in memory (python-multipart, which Starlette's
`request.form()` needs, is not a dependency here).

It reads what the standard library's email parser read when the whole body was parsed at once,
so that an upload is taken, or refused, as before: the boundary of the Content-Type (a
multipart type without one, or a body without its boundary, has no parts), a boundary line
at the start of a line, `--boundary` then blanks (and `--` for the last one); each part's
headers read by the email parser (its `name` and filename, RFC 2231 and quoting included); a
part's data ends before the line break ahead of the next boundary line; a part encoded
base64 or quoted-printable is decoded (in memory: no client of this API sends one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from email.message import Message
from email.parser import BytesHeaderParser, BytesParser
from email.policy import HTTP
from io import BufferedWriter
from pathlib import Path

from simulator.spool import Spool, discard

# How far the line of a boundary may run (blanks after it) before it is taken for data, and
# how long a part's headers may be: a body beyond either is not a form this API reads.
_MOST_LINE = 1024
_MOST_HEADERS = 64 * 1024
# The encodings the email parser decoded: such a part is held in memory and decoded whole.
_DECODED = frozenset({"base64", "quoted-printable", "x-uuencode", "uuencode", "uue", "x-uue"})


@dataclass
class FormPart:
    """One named part: a field's bytes, or the file on disk a file part was written to."""

    filename: str | None
    value: bytes = b""
    path: Path | None = None
    size: int = 0


@dataclass
class _Open:
    """The part being read: where its data goes (None: a part no one asked for)."""

    name: str
    filename: str | None
    encoding: str
    memory: bytearray | None = None
    file: BufferedWriter | None = None
    path: Path | None = None
    size: int = 0
    keep: bool = True
    most: int | None = None  # on disk, past this nothing more is written (all is counted)

    def write(self, data: bytes | bytearray) -> None:
        if not self.keep or not data:
            return
        if self.file is not None:
            if self.most is None or self.size <= self.most:
                self.file.write(data)
        elif self.memory is not None:
            self.memory += data
        self.size += len(data)


@dataclass
class FormReader:
    """Pushed a body chunk by chunk (`feed`), then `close`d: its parts by name (the last of a
    name wins, as a dict of them did). Only the names in `kept` are kept; those in `to_disk`
    are written to a fresh file of `spool`, the others held in memory. A part on disk is
    counted whole but written only while its size is within `most` (a file over the limit
    is refused: it need not fill the disk first)."""

    content_type: str
    spool: Spool
    kept: frozenset[str]
    to_disk: frozenset[str]
    most: int | None = None
    parts: dict[str, FormPart] = field(default_factory=dict)
    # A line break ahead of the body: its first boundary line needs none before it.
    _buffer: bytearray = field(default_factory=lambda: bytearray(b"\n"))
    _state: str = "preamble"  # then headers, body, headers, body... epilogue
    _skip: int = 0  # bytes at the buffer's start that are not the part's data
    _part: _Open | None = None

    def __post_init__(self) -> None:
        self._delimiter = _delimiter(self.content_type)
        if self._delimiter is None:
            self._state = "epilogue"  # not a multipart body: it has no parts

    def feed(self, chunk: bytes) -> None:
        if self._state == "epilogue":
            return
        self._buffer += chunk
        while self._step(eof=False):
            pass

    def close(self) -> dict[str, FormPart]:
        while self._state != "epilogue" and self._step(eof=True):
            pass
        if self._state == "body":  # no closing boundary: the part runs to the body's end
            self._end_part(len(self._buffer))
        self._abandon()
        return self.parts

    def _step(self, *, eof: bool) -> bool:
        """One move of the reader; False: it needs more of the body."""
        if self._state == "epilogue":
            self._buffer.clear()
            return False
        if self._state == "headers":
            return self._headers(eof=eof)
        found = self._boundary(eof=eof)
        if isinstance(found, int):  # none yet: what comes before `found` is data (or preamble)
            self._flush(found)
            return False
        start, end, closing = found
        if self._state == "body":
            self._end_part(start)
        del self._buffer[:end]
        self._skip = 0
        self._state = "epilogue" if closing else "headers"
        return True

    def _boundary(self, *, eof: bool) -> tuple[int, int, bool] | int:
        """(where its line break is, where its line ends, whether it is the last) of the next
        boundary line in the buffer; else where the buffer must be kept from, as a boundary
        line may start there (the CR of its line break with it)."""
        delimiter, buffer = self._delimiter or b"", self._buffer
        at = self._skip - 1 if self._skip else 0
        while (start := buffer.find(delimiter, at)) >= 0:
            after = start + len(delimiter)
            line_end = buffer.find(b"\n", after)
            if line_end < 0 and not eof and len(buffer) - after < _MOST_LINE:
                return max(self._skip, start - 1)  # its line may go on in the next chunk
            rest = bytes(buffer[after : line_end if line_end >= 0 else len(buffer)])
            rest = rest.removesuffix(b"\r")
            closing = rest.startswith(b"--")
            if not rest.removeprefix(b"--").strip(b" \t"):
                return start, (line_end + 1 if line_end >= 0 else len(buffer)), closing
            at = start + 1  # `--boundary` and more on its line: data
        return max(self._skip, len(buffer) - len(delimiter) - 1)

    def _flush(self, upto: int) -> None:
        """Hand the buffer's data up to `upto` to the part (none in the preamble)."""
        if upto <= self._skip:
            return
        if self._part is not None and self._state == "body":
            self._part.write(self._buffer[self._skip : upto])
        del self._buffer[:upto]
        self._skip = 0

    def _end_part(self, upto: int) -> None:
        """The part's data ends at `upto`, less the line break's CR."""
        tail = upto
        if tail > self._skip and self._buffer[tail - 1 : tail] == b"\r":
            tail -= 1
        part, self._part = self._part, None
        if part is not None:
            part.write(self._buffer[self._skip : tail])
            self._kept(part)

    def _headers(self, *, eof: bool) -> bool:
        blank = _blank_line(self._buffer)
        if blank < 0:
            if eof or len(self._buffer) > _MOST_HEADERS:
                self._state = "epilogue"  # headers that never end: nothing more is read
            return False
        headers = BytesHeaderParser(policy=HTTP).parsebytes(bytes(self._buffer[: blank + 1]))
        del self._buffer[:blank]  # its own line break stays: a boundary may follow at once
        self._skip, self._state = 1, "body"
        self._part = self._opened(headers)
        return True

    def _opened(self, headers: Message) -> _Open:
        name = headers.get_param("name", header="content-disposition")
        encoding = str(headers.get("content-transfer-encoding", "")).strip().lower()
        part = _Open(str(name) if name else "", headers.get_filename(), encoding)
        part.keep = bool(name) and part.name in self.kept
        if not part.keep:
            return part
        if part.name in self.to_disk and encoding not in _DECODED:
            part.path = self.spool.fresh("upload")
            part.file = part.path.open("wb")
            part.most = self.most
        else:
            part.memory = bytearray()
        return part

    def _kept(self, part: _Open) -> None:
        if not part.keep:
            return
        if part.file is not None:
            part.file.close()
        value = bytes(part.memory or b"")
        if part.encoding in _DECODED:
            value = _decoded(part.encoding, value)
        if part.name in self.to_disk and part.path is None:
            part.path = self.spool.fresh("upload")
            part.path.write_bytes(value)
            part.size, value = len(value), b""
        elif part.encoding in _DECODED:
            part.size = len(value)
        if (before := self.parts.get(part.name)) is not None:
            discard(before.path)
        self.parts[part.name] = FormPart(part.filename, value, part.path, part.size)

    def _abandon(self) -> None:
        """A part the body ended in the headers of, or left open: none of it is kept."""
        part, self._part = self._part, None
        if part is not None and part.file is not None:
            part.file.close()
            discard(part.path)

    def discard(self) -> None:
        """Remove every file the parts were written to (the upload was refused)."""
        self._abandon()
        for part in self.parts.values():
            discard(part.path)


def _delimiter(content_type: str) -> bytes | None:
    """b"\\n--" and the boundary of a multipart Content-Type; None for any other."""
    header = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(header, headersonly=True)
    boundary = message.get_boundary() if message.get_content_maintype() == "multipart" else None
    if not boundary:
        return None
    try:
        return b"\n--" + boundary.encode("ascii", "surrogateescape")
    except UnicodeEncodeError:
        return None


def _blank_line(buffer: bytearray) -> int:
    """Where the line break of the blank line that ends a part's headers is, or -1."""
    if buffer.startswith(b"\n"):
        return 0
    if buffer.startswith(b"\r\n"):
        return 1
    ends = []
    if (at := buffer.find(b"\n\n")) >= 0:
        ends.append(at + 1)
    if (at := buffer.find(b"\n\r\n")) >= 0:
        ends.append(at + 2)
    return min(ends, default=-1)


def _decoded(encoding: str, raw: bytes) -> bytes:
    """A part's data as the email parser decoded it (`get_payload(decode=True)`)."""
    message = Message()
    message["Content-Transfer-Encoding"] = encoding
    message.set_payload(raw.decode("ascii", "surrogateescape"))
    payload = message.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""
