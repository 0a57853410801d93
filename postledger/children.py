"""Child processes that postledger starts (the simulator, the local Prefect server)."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import httpx


def stop_child(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Ask the child to stop, and make it stop if it does not within `timeout`."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_answering(
    process: subprocess.Popen[Any], url: str, *, timeout: float, interval: float = 0.1
) -> str | None:
    """Look at `url` until it answers with a success. None when it does; otherwise why not:
    the child exited, or `timeout` seconds passed. One client for all the looks: each new one
    builds a TLS context, ~10 ms of CPU taken from the child that is starting."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as client:
        while True:
            try:
                if client.get(url).is_success:
                    return None
            except httpx.HTTPError:
                pass
            if process.poll() is not None:
                return f"exited with code {process.returncode}"
            if time.monotonic() > deadline:
                return f"did not answer within {timeout:g} s"
            time.sleep(interval)
