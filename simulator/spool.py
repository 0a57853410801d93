"""Where the simulator keeps what its Batch API faces hold between requests: uploaded input
files, what a batch's lines hold, output and results files, on disk rather than in memory.

A month's job is an input file of up to 200 MB (OpenAI) or a create body of up to 256 MB
(Anthropic); held in memory, with what each request answers, two such jobs in flight took the
simulator past 4 GB. On disk, a request of the API holds a line or a request at a time.

One folder per simulator, under the system's temporary folder, removed when it stops
(`TemporarySpool.close`, called by `simulator.server.serve` on its way out, and by the
folder's own finalizer when the app is collected or the interpreter exits). Each face keeps
its files in a subfolder of its own (`Spool.within`), cleared by a reset (`POST /_sim/reset`).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# What a file is read and written in: a line of a month's job is ~12 kB, and a larger chunk
# only holds more in memory at once.
CHUNK = 1 << 16


@dataclass
class Spool:
    """A folder of files the simulator made; none of them outlives the simulator."""

    root: Path

    def path(self, name: str) -> Path:
        return self.root / name

    def fresh(self, prefix: str, suffix: str = ".jsonl") -> Path:
        """A name no other file of this folder has (none is made)."""
        return self.root / f"{prefix}-{uuid.uuid4().hex[:16]}{suffix}"

    def within(self, name: str) -> Spool:
        (self.root / name).mkdir(parents=True, exist_ok=True)
        return Spool(self.root / name)

    def clear(self) -> None:
        """Remove every file of this folder (a reader that has one open still reads it)."""
        for path in self.root.iterdir():
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


class TemporarySpool(Spool):
    """The simulator's own folder under the system's temporary folder."""

    def __init__(self) -> None:
        # Its finalizer removes the folder should `close` never be called (an app made in a
        # test process, collected or left at exit).
        self._owner = tempfile.TemporaryDirectory(prefix="postledger-sim-")
        super().__init__(Path(self._owner.name))

    def close(self) -> None:
        self._owner.cleanup()


def discard(*paths: Path | None) -> None:
    for path in paths:
        if path is not None:
            path.unlink(missing_ok=True)


def lines_of(path: Path) -> Iterator[bytes]:
    """The lines of a file, one at a time, each with its b"\\n" (the last may lack it)."""
    with path.open("rb", buffering=CHUNK) as file:
        yield from file
