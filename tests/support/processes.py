"""Processes a test starts, and their end however the session ends.

Every child a test starts is started in a process group of its own (`spawn`) and its group is
killed in a `finally` (`stop`, `running`, and `tests.support.commands`). Behind that, two nets
for what a `finally` never reached (a Ctrl-C at the wrong moment, a pytest worker killed by
xdist):
- every pytest process (the xdist controller and each worker) writes its mark,
  `POSTLEDGER_TEST_OWNER=<run id>/<its pid>`, into its environment, and every process started
  from it inherits it, grandchildren (a `postledger run`'s Prefect server) included. At its
  end a process kills what it started and is still registered, then every process bearing its
  own mark; the controller, last of all, every process bearing the run's id (Linux: read from
  /proc/<pid>/environ);
- every database is written down in the run's folder before it is created, and dropped by
  whoever ends last (its creator, else the controller): `tests.support.databases`. A session
  start drops what killed runs left behind (older than an hour: another run on this machine
  may be using the newer).
The session's end, and the run's, are `tests.support.session`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

OWNER_VAR = "POSTLEDGER_TEST_OWNER"  # "<run id>/<pid of the pytest process that started it>"
RUN_DIR_VAR = "POSTLEDGER_TEST_RUN_DIR"  # the run's folder: its id is the folder's name
# What a pytest worker's own Prefect client runs with (see `prefect_api.local_prefect_api`,
# which adds to it) that no child may inherit: a child `postledger run` starts its own local
# server, as a user's does.
_WORKER_ONLY = {"PREFECT_API_URL"}

_started: dict[int, subprocess.Popen[Any]] = {}  # pid -> process, each its group's leader
_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the usual small race applies)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def child_env(base: Mapping[str, str] | None = None, **overrides: str) -> dict[str, str]:
    """The environment for a child process, `overrides` on top: `base` as given, or this
    process's own without what only this pytest worker's Prefect client may use."""
    if base is None:
        env = {k: v for k, v in os.environ.items() if k not in _WORKER_ONLY}
    else:
        env = dict(base)
    env.update(overrides)
    return env


def spawn(args: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen` in a process group of its own (a Ctrl-C in the terminal reaches only
    pytest, which then stops it), registered until `stop` ends it."""
    process: subprocess.Popen[Any] = subprocess.Popen(args, start_new_session=True, **popen)
    with _lock:
        _started[process.pid] = process
    return process


def stop(
    process: subprocess.Popen[Any], timeout: float = 10.0, *, first: int = signal.SIGTERM
) -> None:
    """End `process` and whatever it started in its group: `first` (SIGTERM) while it runs,
    SIGKILL for it after `timeout` and for anything of its group still there. (`postledger
    run` starts its server and simulator in sessions of their own: they stop by their
    lifeline, `processes/children.py`.) `first=signal.SIGKILL`: a death with no chance to
    clean up, as a kill -9."""
    try:
        if process.poll() is None:
            _signal_group(process.pid, first)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=timeout)
        # Still reserved while any member is left, so the group id is this one's: no other
        # process group can have it.
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()
    finally:
        with _lock:
            _started.pop(process.pid, None)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command's name (state, ppid, …); None if the
    process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == b"Z" else fields


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (Linux: from /proc)."""
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit()
        and (fields := _stat(int(entry.name))) is not None
        and int(fields[1]) == pid
    ]


def is_alive(pid: int) -> bool:
    return _stat(pid) is not None


def command_line(pid: int) -> str:
    """The command line of process `pid`, its arguments joined by spaces (Linux: from /proc)."""
    try:
        return (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")).decode()
    except OSError:
        return ""


@contextlib.contextmanager
def running(args: list[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """`spawn`, and `stop` at exit, whatever the exit."""
    process = spawn(args, **popen)
    try:
        yield process
    finally:
        stop(process)


def _marked(accept: Callable[[str], bool]) -> list[int]:
    """Live processes (not this one, not zombies) whose environment bears an accepted mark."""
    needle = f"{OWNER_VAR}=".encode()
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []  # no /proc: only what is registered is stopped
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as file:
                environ = file.read()
        except OSError:
            continue
        if started_at(int(name)) is None:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(needle):
                if accept(item[len(needle) :].decode(errors="replace")):
                    found.append(int(name))
                break
    return found


def started_at(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), None if it is gone or a zombie:
    with its pid, what tells it from a later process that got the same pid."""
    fields = _stat(pid)
    return None if fields is None else int(fields[19])


def _kill_marked(accept: Callable[[str], bool], grace: float = 5.0) -> list[int]:
    """SIGTERM the marked processes, SIGKILL those still there after `grace` seconds."""
    first = _marked(accept)
    for pid in first:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (left := _marked(accept)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return first


def run_id() -> str | None:
    run_dir = os.environ.get(RUN_DIR_VAR)
    return Path(run_dir).name if run_dir else None


def begin_run() -> Path:
    """In the process that leads the session (the xdist controller, or pytest without xdist):
    a new run, its folder, and the mark of this process. The workers inherit both."""
    run_dir = Path(tempfile.mkdtemp(prefix="postledger-test-run-"))
    os.environ[RUN_DIR_VAR] = str(run_dir)
    join_run()
    return run_dir


def join_run() -> None:
    """Mark what this pytest process starts from now on as its own."""
    if (run := run_id()) is not None:
        os.environ[OWNER_VAR] = f"{run}/{os.getpid()}"


def end_own_processes(*, registered_only: bool = False) -> None:
    """Stop every registered process still running, then (unless `registered_only`) every
    process bearing this process's mark: what registered ones started, what a test started
    without `spawn`. (The xdist controller's mark is on its workers too: it sweeps last.)"""
    with _lock:
        left = list(_started.values())
    for process in left:
        stop(process, timeout=5)
    if registered_only:
        return
    if (mark := os.environ.get(OWNER_VAR)) and mark.endswith(f"/{os.getpid()}"):
        _kill_marked(lambda value: value == mark)
