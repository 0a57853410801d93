"""Starting the simulator as a child process (`postledger sim serve`), as `postledger run` and
the tests do. Apart from `server.py` so that starting one imports neither uvicorn nor the
simulator's app: `postledger run` starts it before its own heavier imports."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from processes.children import start_child, stop_child, wait_answering

READY_PREFIX = "postledger simulator listening on "


class StartingSimulator:
    """A simulator child that was started and may not answer yet: `wait_ready` gives its URL.
    Lets its start-up overlap with other work (the local Prefect server's)."""

    def __init__(self, process: subprocess.Popen[str], startup_timeout: float) -> None:
        self._process = process
        self._timeout = startup_timeout
        self._url: str | None = None

    @property
    def pid(self) -> int:
        """The child's process id: a bench reads its memory from /proc."""
        return self._process.pid

    def wait_ready(self) -> str:
        if self._url is None:
            self._url = _wait_ready(self._process, self._timeout)
        return self._url


@contextmanager
def simulator_process(**options: Any) -> Iterator[str]:
    """Start `postledger sim serve` on a free loopback port; yields its base URL once it
    answers. Options as `starting_simulator`'s."""
    with starting_simulator(**options) as simulator:
        yield simulator.wait_ready()


@contextmanager
def starting_simulator(
    *,
    latency: float = 1.0,
    seed: int = 0,
    api_key: str | None = None,
    create_delay: float = 0.0,
    faults: str | None = None,
    scenario: str | None = None,
    honour_keys: bool = True,
    startup_timeout: float = 30,
) -> Iterator[StartingSimulator]:
    """Start `postledger sim serve` on a free loopback port without waiting for it; stopped on
    leaving, and when this process dies (`processes.children.start_child`, which starts it in
    a session of its own: a Ctrl-C reaches only its parent, which stops it when done)."""
    args = [
        sys.executable,
        "-m",
        "cli",
        "sim",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--latency",
        str(latency),
        "--seed",
        str(seed),
        "--create-delay",
        str(create_delay),
    ]
    if faults:
        args += ["--faults", faults]
    if scenario:
        args += ["--scenario", scenario]
    if not honour_keys:
        args.append("--ignore-idempotency-keys")
    env = dict(os.environ)
    if api_key is not None:
        env["POSTLEDGER_SIM_API_KEY"] = api_key  # not on the command line, where ps shows it
    process = start_child(args, env=env, stdout=subprocess.PIPE, text=True)
    try:
        yield StartingSimulator(process, startup_timeout)
    finally:
        stop_child(process)


def _wait_ready(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith(READY_PREFIX):
        process.kill()
        raise RuntimeError(f"the simulator did not start (it said {line!r})")
    url = line[len(READY_PREFIX) :].strip()
    if problem := wait_answering(process, f"{url}/_sim/stats", timeout=timeout, interval=0.05):
        process.kill()
        raise RuntimeError(f"the simulator at {url} {problem}")
    return url
