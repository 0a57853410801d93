"""The spill file (R20): what a batch already sent learns while the ledger cannot be written.

A paid task id or output must not be lost because the database is locked, full or gone. It is
appended here — one JSON line, flushed to disk — and the next run imports it into the ledger
before anything else, then moves the file aside. Append-only: nothing is rewritten in place.
"""

from __future__ import annotations

import json
import os
import threading
from enum import StrEnum
from pathlib import Path
from typing import Any

from postledger.models import utcnow


class SpillKind(StrEnum):
    TASK_ID = "task_id"  # the upstream task id of a batch (R23: recovery polls it)
    OUTPUT = "output"  # a batch's raw output and usage (R21: finished without paying again)
    REQUEST_RETRY = "request_retry"  # one request-layer retry of a batch (R16)


class SpillError(RuntimeError):
    """The spill file itself cannot be read; the message names the file and the line."""


_guard = threading.Lock()


class Spill:
    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, kind: SpillKind, batch_id: str, **facts: Any) -> None:
        """Append one record and make it durable before returning."""
        line = json.dumps(
            {"kind": kind.value, "batch_id": batch_id, "at": utcnow().isoformat(), **facts},
            ensure_ascii=False,
        )
        with _guard:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as file:
                file.write(line + "\n")
                file.flush()
                os.fsync(file.fileno())

    def records(self) -> list[dict[str, Any]]:
        """Every record, oldest first; none if there is no spill."""
        if not self.path.is_file():
            return []
        records = []
        with self.path.open(encoding="utf-8") as file:
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

    def archive(self) -> Path:
        """Move the imported file aside (kept, for the record) so it is not imported twice."""
        stamp = utcnow().strftime("%Y%m%dT%H%M%S%fZ")
        target = self.path.with_name(f"{self.path.name}.imported-{stamp}")
        with _guard:
            self.path.rename(target)
        return target
