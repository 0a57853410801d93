"""The spill file (R20): what a batch already sent learns while the ledger cannot be written.

A paid task id or output must not be lost because the database is locked, full or gone. It is
appended here — one JSON line, flushed to disk — and the next run of the month imports it into
the ledger before anything else, then moves the file aside. One file per month, so that one
month's import never takes another month's records. Writers and the importer lock the file
(`flock`): a record is appended to the file the importer will read, never to one it has just
moved aside. Every record has an id that the ledger remembers once imported, so a file read
twice (a crash between import and move) is taken in once.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from postledger.record.kinds import month_of, utcnow

T = TypeVar("T")


class SpillKind(StrEnum):
    TASK_ID = "task_id"  # the upstream task id of a batch (R23: recovery polls it)
    OUTPUT = "output"  # a batch's raw output and usage (R21: finished without paying again)
    REQUEST_RETRY = "request_retry"  # one request-layer retry of a batch (R16)


class SpillError(RuntimeError):
    """The spill file itself cannot be read; the message names the file and the line."""


class SpillFailed(RuntimeError):
    """Neither the ledger nor the spill file could take a fact a paid batch learned: the
    message holds the fact itself (never a secret), so that it is at least in the log."""


_guard = threading.Lock()


def month_file(base: Path, month: str) -> Path:
    """The spill file of `month` for a configured location: a folder, or a file name whose
    month's sibling is used (`ledger.db.spill.jsonl` -> `ledger.db.spill-2026-10.jsonl`)."""
    if base.is_dir():
        return base / f"spill-{month}.jsonl"
    stem = base.name.removesuffix(".jsonl")
    return base.with_name(f"{stem}-{month}.jsonl")


def spill_for(settings: SpillLocation, batch_id: str) -> Spill:
    """The spill file of the batch's month."""
    return Spill(settings.spill_file(month_of(batch_id)))


class SpillLocation(Protocol):
    def spill_file(self, month: str) -> Path: ...


class Spill:
    def __init__(self, path: Path) -> None:
        self.path = path

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
        line = json.dumps(record, ensure_ascii=False)
        try:
            with _guard, self._locked("a") as file:
                file.write(line + "\n")
                file.flush()
                os.fsync(file.fileno())
        except OSError as exc:
            shown = {k: v for k, v in record.items() if k not in ("output", "usage")}
            raise SpillFailed(
                f"the ledger could not be written, and neither could the spill file {self.path} "
                f"({type(exc).__name__}: {exc}). Not saved anywhere but this message: {shown}. "
                "The run stops; fix the disk or the database, then run again (a task id above "
                "can be polled)."
            ) from exc

    def records(self) -> list[dict[str, Any]]:
        """Every record, oldest first; none if there is no spill."""
        if not self.path.is_file():
            return []
        with self.path.open(encoding="utf-8") as file:
            return self._parse(file)

    def take(self, importer: Callable[[list[dict[str, Any]]], T]) -> T | None:
        """Hand every record to `importer` and then move the file aside, holding the file's
        lock throughout, so that no writer appends to it in between. None if no file."""
        if not self.path.is_file():
            return None
        try:
            with _guard, self._locked("r") as file:
                result = importer(self._parse(file))
                self.archive()
        except FileNotFoundError:
            return None  # another run imported it meanwhile
        return result

    def archive(self) -> Path:
        """Move the imported file aside (kept, for the record) so it is not imported again."""
        stamp = utcnow().strftime("%Y%m%dT%H%M%S%fZ")
        target = self.path.with_name(f"{self.path.name}.imported-{stamp}")
        self.path.rename(target)
        return target

    @contextmanager
    def _locked(self, mode: str) -> Iterator[IO[str]]:
        """The file, open and locked; opened again if it was moved aside while we waited."""
        while True:
            if "a" in mode:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            file = self.path.open(mode, encoding="utf-8")
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

    def _parse(self, file: IO[str]) -> list[dict[str, Any]]:
        records = []
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                SpillKind(record["kind"])
                str(record["batch_id"])
            except (ValueError, KeyError, TypeError) as exc:
                if not line.endswith("\n"):
                    continue  # the last line, cut short by a crash mid-write: never durable
                raise SpillError(
                    f"{self.path}:{number}: not a spill record ({exc}); fix or remove that "
                    "line, then run again"
                ) from None
            records.append(record)
        return records
