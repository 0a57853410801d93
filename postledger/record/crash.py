"""Crash points — for tests only. Off unless POSTLEDGER_CRASH_AT names one.

Each point sits between a ledger write and an upstream call. When POSTLEDGER_CRASH_AT names a
point, the process exits there at once with `os._exit` — no `finally`, no flush, no cleanup —
as a `kill -9` or a power cut would, so tests can prove a restart finishes from what was saved
(R21–R26). With POSTLEDGER_CRASH_SKIP=N it passes the point N times first (a crash in the
middle of a job's lines, not at the first). Never set it in production.

On a Batch API a job's lines are settled a chunk at a time (`trip.settle.settle_outputs`):
there `after_output` is before a chunk's outputs are saved, `during_validation` between
saving them and deciding any of them, `after_completed` once the chunk's decisions are applied.
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum

CRASH_EXIT_CODE = 86


class CrashPoint(StrEnum):
    AFTER_RUNNING = "after_running"  # intent persisted, the create not yet sent
    AFTER_CREATE = "after_create"  # the upstream made the task; its id not yet saved
    AFTER_TASK_ID = "after_task_id"  # the task id saved; nothing received yet
    AFTER_OUTPUT = "after_output"  # the output received, not yet saved
    DURING_VALIDATION = "during_validation"  # the output saved (`received`), not yet checked
    AFTER_COMPLETED = "after_completed"  # the batch's decision applied


_passed: dict[CrashPoint, int] = {}


def crash_point(point: CrashPoint) -> None:
    if os.environ.get("POSTLEDGER_CRASH_AT") == point.value:
        _passed[point] = _passed.get(point, 0) + 1
        if _passed[point] <= int(os.environ.get("POSTLEDGER_CRASH_SKIP") or 0):
            return
        sys.stderr.write(f"postledger: crash point {point.value} reached: exiting now\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)
