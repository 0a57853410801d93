"""The spill file (R20, R46): what a batch already sent learns while the ledger cannot be written.

A paid task id or output must not be lost because the database is locked, full or gone. It is
appended here — one JSON line, flushed to disk — and the next run of the month imports it into
the ledger before anything else, then moves the file aside. One file per month, so that one
month's import never takes another month's records. Writers and the importer lock the file
(`flock`): a record is appended to the file the importer will read, never to one it has just
moved aside. Every record has an id that the ledger remembers once imported, so a file read
twice (a crash between import and move) is taken in once.

Every record is self-delimiting and checked: it starts on a line of its own (a write cut short
by a full disk or a crash cannot swallow the next record) and carries a checksum of its own
content. A damaged line (cut short, garbled, or its checksum wrong) stops nothing: the other
records are imported and its bytes are kept aside, exactly as they were, in `<file>.damaged`
for a person to read, since it may hold a task id or an output already paid for.
"""

from __future__ import annotations

import codecs
import fcntl
import hashlib
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from postledger.errors import PostledgerError
from postledger.record.kinds import month_of, utcnow

T = TypeVar("T")

CHECK = "check"  # the field holding a record's checksum; records of earlier versions have none


class SpillKind(StrEnum):
    TASK_ID = "task_id"  # the upstream task id of a batch (R23: recovery polls it)
    OUTPUT = "output"  # a batch's raw output and usage (R21: finished without paying again)
    REQUEST_RETRY = "request_retry"  # one request-layer retry of a batch (R16)
    GATEWAY_RETRIES = "gateway_retries"  # a gateway's own retries of a batch's request (R42)
    USAGE = "usage"  # what an answer without an output reported it used (R51)


class SpillError(PostledgerError):
    """The spill file cannot be read at all (an OS error, or it is not UTF-8 text at all), or
    its damaged lines cannot be kept aside; the message names the file. Nothing is moved."""


class SpillFailed(PostledgerError):
    """Neither the ledger nor the spill file could take a fact a paid batch learned: the
    message holds the fact itself (never a secret), so that it is at least in the log."""


@dataclass(frozen=True)
class KeptAside:
    """What an import kept aside: the damaged lines `lines` of the spill file `spill` (now moved
    aside as `archived`), appended as they were to `path`."""

    path: Path
    lines: tuple[int, ...]
    spill: Path
    archived: Path

    def message(self) -> str:
        """What a person must be told: loudly, with what the lines may hold and what to do."""
        n = len(self.lines)
        what = "1 record" if n == 1 else f"{n} records"
        numbers = ", ".join(str(number) for number in self.lines)
        return (
            f"{what} of the spill file {self.spill} could not be read by the ledger (cut short "
            "or damaged, as a full disk or a crash can leave a write) and "
            f"{'was' if n == 1 else 'were'} kept aside, byte for byte, at {self.path} "
            f"({'line' if n == 1 else 'lines'} {numbers} of {self.archived}); the other records "
            "were imported. What was kept aside may hold an upstream task id or an output that "
            f"was already paid for: do not delete {self.path} before a person has looked at "
            'it. Each of its lines is the JSON of a spill record, perhaps cut short: a "task_id" '
            "in it can be polled upstream to fetch its output without paying again, and an "
            '"output" in it is what was paid for.'
        )


@dataclass(frozen=True)
class _Damaged:
    number: int  # its line number in the spill file
    raw: bytes  # exactly as read, its newline included if it had one


_guard = threading.Lock()


def spill_for(settings: SpillLocation, batch_id: str) -> Spill:
    """The spill file of the batch's month."""
    return Spill(settings.spill_file(month_of(batch_id)))


class SpillLocation(Protocol):
    def spill_file(self, month: str) -> Path: ...


class Spill:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.kept_aside: KeptAside | None = None  # what the last `take` kept aside, if anything

    def add(self, kind: SpillKind, batch_id: str, **facts: Any) -> None:
        """Append one record and make it durable before returning; `SpillFailed` (with the
        facts in its message) if it cannot."""
        record = {
            "id": uuid.uuid4().hex,
            "kind": kind.value,
            "batch_id": batch_id,
            "at": utcnow().isoformat(),
            **facts,
        }
        record[CHECK] = _checksum(record)
        # ASCII (non-ASCII escaped): a line cut short is never cut inside a character, and a
        # string that cannot be encoded (a lone surrogate) cannot stop a paid fact being kept.
        line = json.dumps(record).encode("ascii") + b"\n"
        try:
            with _guard, self._locked("ab+") as file:
                file.write(_newline_needed(file) + line)
                file.flush()
                os.fsync(file.fileno())
        except OSError as exc:
            shown = {k: v for k, v in record.items() if k not in ("output", "usage", CHECK)}
            raise SpillFailed(
                f"the ledger could not be written, and neither could the spill file {self.path} "
                f"({type(exc).__name__}: {exc}). Not saved anywhere but this message: {shown}. "
                "The run stops; fix the disk or the database, then run again (a task id above "
                "can be polled)."
            ) from exc

    def records(self) -> list[dict[str, Any]]:
        """Every readable record, oldest first (damaged lines skipped); none if no spill."""
        if not self.path.is_file():
            return []
        with self.path.open("rb") as file:
            return self._read(file)[0]

    def take(self, importer: Callable[[list[dict[str, Any]]], T]) -> T | None:
        """Hand every readable record to `importer`, keep the damaged lines aside (then
        `kept_aside` says where) and move the file aside, holding the file's lock throughout,
        so that no writer appends to it in between. None if no file."""
        self.kept_aside = None
        if not self.path.is_file():
            return None
        try:
            with _guard, self._locked("rb") as file:
                records, damaged = self._read(file)
                result = importer(records)
                # After the import, before the move: if they cannot be kept aside the file
                # stays where it is, and the next run imports nothing twice (by the ids).
                kept = self._keep_aside(damaged) if damaged else None
                archived = self.archive()
        except FileNotFoundError:
            return None  # another run imported it meanwhile
        if kept is not None:
            lines = tuple(d.number for d in damaged)
            self.kept_aside = KeptAside(kept, lines, self.path, archived)
        return result

    def archive(self) -> Path:
        """Move the imported file aside (kept, for the record) so it is not imported again."""
        stamp = utcnow().strftime("%Y%m%dT%H%M%S%fZ")
        target = self.path.with_name(f"{self.path.name}.imported-{stamp}")
        self.path.rename(target)
        return target

    @contextmanager
    def _locked(self, mode: str) -> Iterator[IO[bytes]]:
        """The file, open and locked; opened again if it was moved aside while we waited."""
        while True:
            if "a" in mode:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            file = self.path.open(mode)
            fcntl.flock(file.fileno(), fcntl.LOCK_EX)
            try:
                same = os.stat(self.path).st_ino == os.fstat(file.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            file.close()  # the importer took that one: ours is the next file
            if "r" in mode and not self.path.is_file():
                raise FileNotFoundError(self.path)
        try:
            yield file
        finally:
            file.close()  # closing releases the lock

    def _read(self, file: IO[bytes]) -> tuple[list[dict[str, Any]], list[_Damaged]]:
        """The records, and the damaged lines: skipped, never fatal (R46). Under the lock no
        write is under way, so a last line without its newline was cut short too."""
        try:
            lines = file.readlines()  # split at b"\n" only, as written
        except OSError as exc:
            raise SpillError(f"the spill file {self.path} cannot be read: {exc}") from exc
        records: list[dict[str, Any]] = []
        damaged: list[_Damaged] = []
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            record = _record_of(raw)
            if record is None:
                damaged.append(_Damaged(number, raw))
            else:
                records.append(record)
        # Every writer wrote UTF-8 from the file's first byte: a file with no record whose
        # first line is not UTF-8 (a character cut at its end aside) is no spill file at all,
        # say one put at the spill path by mistake; it is left alone, not moved or copied.
        if lines and not records and not _is_text(lines[0]):
            raise SpillError(
                f"{self.path} is not UTF-8 text at all, so not a spill file this program wrote: "
                "nothing was imported and it was left as it is. If the spill location is set "
                "wrongly, set POSTLEDGER_SPILL_PATH to the spill folder; otherwise a person must "
                "look at the file (it may hold paid outputs) and move it, kept, out of the spill "
                "folder before the next run."
            )
        return records, damaged

    def _keep_aside(self, damaged: list[_Damaged]) -> Path:
        """Each damaged line appended, byte for byte, to `<spill file>.damaged` (never
        overwritten) and made durable. A line it holds already (the same file read again
        after a crash before the move) is not added twice."""
        path = self.path.with_name(f"{self.path.name}.damaged")
        try:
            with path.open("ab+") as file:
                file.seek(0)
                held = set(file.read().split(b"\n"))
                for line in damaged:
                    content = line.raw.removesuffix(b"\n")
                    if content not in held:
                        held.add(content)
                        file.write(_newline_needed(file) + line.raw)
                        file.flush()  # so that the next `_newline_needed` sees it
                os.fsync(file.fileno())
        except OSError as exc:
            raise SpillError(
                f"damaged lines of the spill file {self.path} could not be kept aside at {path} "
                f"({exc}). Its readable records were imported; the file was left as it is. Make "
                "room on the disk, then run again."
            ) from exc
        return path


def _checksum(fields: dict[str, Any]) -> str:
    """A short hash of the record's canonical JSON (sorted keys, ASCII, no spaces) without its
    checksum: the writer's dict and the reader's parse of the line give the same text."""
    canonical = json.dumps(
        {k: v for k, v in fields.items() if k != CHECK}, sort_keys=True, separators=(",", ":")
    )
    return "sha256:" + hashlib.sha256(canonical.encode("ascii")).hexdigest()[:16]


def _record_of(raw: bytes) -> dict[str, Any] | None:
    """The record a line holds, or None if it is damaged: not UTF-8 JSON (cut short, two
    records glued by a torn write), not a record, or its checksum does not match."""
    try:
        record = json.loads(raw.decode("utf-8"))  # UnicodeDecodeError is a ValueError too
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("batch_id"), str):
        return None
    kind = record.get("kind")
    if not isinstance(kind, str) or kind not in {known.value for known in SpillKind}:
        return None
    if kind == SpillKind.OUTPUT and not isinstance(record.get("output"), str):
        return None  # its import would fail on it, and with it the month's import
    if CHECK in record and record[CHECK] != _checksum(record):
        return None
    return record  # with a matching checksum, or written by an earlier version (none)


def _is_text(raw: bytes) -> bool:
    """UTF-8, allowing a character cut short at the end (a torn write)."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(raw, final=False)
    except UnicodeDecodeError:
        return False
    return True


def _newline_needed(file: IO[bytes]) -> bytes:
    """A newline if the file does not end with one (a write cut mid-line by a full disk or a
    crash), so that what is appended next starts on a line of its own."""
    fd = file.fileno()
    size = os.fstat(fd).st_size
    return b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""
