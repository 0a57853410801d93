"""Waiting in a test: for a check to hold, for a call made in the background."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """`check()`'s first truthy value, looked for every 0.1 s for up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def in_background(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """`target()` in a daemon thread; its result, or the exception it raised, lands in the
    dict as "result" or "error"."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = target()
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome
