"""Child processes that postledger starts (the simulator, the local Prefect server), and the
lifeline that ends them when their parent dies, however it dies.

Why a lifeline: a parent that is killed (`kill -9`, `os._exit` at a crash point, the OOM
killer) runs no clean-up, and its children were seen running for minutes without a parent. The
parent keeps the write end of a pipe whose read end only the child holds; the kernel closes
the write end when the parent dies, the child's read then returns, and the child stops itself.
Portable (no Linux-only `PR_SET_PDEATHSIG`), and it cannot fire while the parent lives.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# The read end's file descriptor number, in the child's environment.
LIFELINE_VAR = "POSTLEDGER_PARENT_LIFELINE_FD"
# After the parent is gone, how long a child may take to stop cleanly before it is ended.
_GRACE_SECONDS = 10.0


class QuietStop(logging.Filter):
    """For uvicorn's error log in a child: a stop cuts open connections after a second
    (`timeout_graceful_shutdown`), which is expected, and not an error a user should read at
    the end of every run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "timeout graceful shutdown exceeded" not in record.getMessage()


def start_child(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    pass_fds: Sequence[int] = (),
    **popen: Any,
) -> subprocess.Popen[Any]:
    """Popen with a lifeline: the child (which calls `watch_parent` at its start) stops when
    this process dies. The write end stays open, unshared, for this process's life.

    In a session of its own: a terminal's Ctrl-C, or a signal to this process's group (as
    `timeout` sends), reaches this process alone, which still has its children while it stops
    (the local Prefect server, which the run reports its end to), and then stops them. Had they
    been stopped at the same moment, the run would spend a minute retrying a server gone."""
    read_end, write_end = os.pipe()  # neither end is inherited unless passed (PEP 446)
    try:
        process = subprocess.Popen(
            list(args),
            env={**env, LIFELINE_VAR: str(read_end)},
            pass_fds=(*pass_fds, read_end),
            start_new_session=True,
            **popen,
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    _LIFELINES[process.pid] = write_end
    return process


_LIFELINES: dict[int, int] = {}


def watch_parent() -> None:
    """In a child started by `start_child`: stop (SIGTERM to itself, then exit) once the parent
    is gone. Does nothing in a process started otherwise."""
    value = os.environ.pop(LIFELINE_VAR, None)
    if value is None:
        return
    fd = int(value)

    def wait_for_parent() -> None:
        try:
            while os.read(fd, 1):  # nothing is ever written: returns b"" when the parent dies
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)  # the server's own clean shutdown
        time.sleep(_GRACE_SECONDS)
        os._exit(1)

    threading.Thread(target=wait_for_parent, name="postledger-lifeline", daemon=True).start()


def on_unexpected_exit(process: subprocess.Popen[Any], then: Callable[[int], None]) -> None:
    """Call `then(exit code)`, in a thread of its own, if the child exits before `stop_child`
    asks it to (a crash, the OOM killer, a signal meant for it alone)."""

    def watch() -> None:
        code = process.wait()
        if process not in _STOPPING:
            then(code)

    threading.Thread(target=watch, name="postledger-child-watch", daemon=True).start()


# The children `stop_child` was asked to stop (by the object: a pid may be taken again).
_STOPPING: weakref.WeakSet[subprocess.Popen[Any]] = weakref.WeakSet()


def stop_child(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Ask the child to stop, and make it stop if it does not within `timeout`."""
    _STOPPING.add(process)
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if (write_end := _LIFELINES.pop(process.pid, None)) is not None:
        os.close(write_end)


def wait_answering(
    process: subprocess.Popen[Any], url: str, *, timeout: float, interval: float = 0.1
) -> str | None:
    """Look at `url` until it answers with a success. None when it does; otherwise why not:
    the child exited, or `timeout` seconds passed. One client for all the looks: each new one
    builds a TLS context, ~10 ms of CPU taken from the child that is starting."""
    # Imported here, once the child is started: `postledger run` starts its children before
    # importing anything it can do without, and httpx takes ~0.1 s to import.
    import httpx

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
