"""Child processes that postledger starts (the simulator, the local Prefect server)."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_child(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Ask the child to stop, and make it stop if it does not within `timeout`."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
