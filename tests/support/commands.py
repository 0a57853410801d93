"""The `postledger` command, and any other, in a process of its own (`tests.support.processes`
ends it and whatever it left running), its output in files; a Prefect home migrated once per
test run for the commands that start a local Prefect server."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import RUN_DIR_VAR, child_env, spawn, stop
from tests.support.repo import REPO


class Processes:
    """`postledger` processes started in one folder with one environment; each in a process
    group of its own, so that the group can be killed (its local server and simulator, in
    sessions of their own, stop by their lifeline)."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env
        self.started: list[subprocess.Popen[bytes]] = []
        self.named: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        # Output to a file: a pipe nobody reads could block it, and an orphan keeps it open.
        with (self.cwd / f"{name}.out").open("wb") as out:
            process = spawn(
                [sys.executable, "-m", "cli", *args],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.started.append(process)
        self.named[name] = process
        return process

    def run(self, name: str, *args: str, timeout: float = 240) -> tuple[int, str]:
        process = self.start(name, *args)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`postledger {' '.join(args)}` did not end:\n{self.output(name)}")
        return code, self.output(name)

    def output(self, name: str) -> str:
        return (self.cwd / f"{name}.out").read_text(errors="replace")

    def kill_all(self) -> None:
        for process in self.started:
            stop(process, first=signal.SIGKILL)

    def wait_for_ledger(
        self,
        name: str,
        ledger_url: str,
        ready: Callable[[Any], bool],
        *,
        what: str,
        timeout: float = 240,
    ) -> None:
        """Until `ready(ledger)` (the ledger opened read-only) while process `name` runs: a new
        `postledger run` on a loaded machine takes a while (its imports, its server)."""
        from sqlalchemy.exc import DBAPIError

        from postledger.ledger import Ledger

        process = self.named[name]
        deadline = time.monotonic() + timeout
        ledger: Ledger | None = None
        try:
            while True:
                assert process.poll() is None, self.output(name)
                assert time.monotonic() < deadline, f"{name} never got there: {what}"
                try:
                    ledger = ledger or Ledger(ledger_url, read_only=True)
                    if ready(ledger):
                        return
                except DBAPIError:
                    pass  # the ledger's file is there, its tables not yet
                time.sleep(0.1)
        finally:
            if ledger is not None:
                ledger.close()


# The commands that start a local Prefect server on their PREFECT_HOME.
_SERVER_COMMANDS = {"run", "setup"}


def postledger(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    fresh_prefect_home: bool = False,
    **extra_env: str,
) -> subprocess.CompletedProcess[str]:
    """One `postledger` command (`python -m cli`), as a person would type it (see
    `run_process`). Its PREFECT_HOME starts with a migrated Prefect database
    (`migrated_prefect_home`) unless `fresh_prefect_home`, as on a user's first run."""
    command = [sys.executable, "-m", "cli", *args]
    home = child_env(env, **extra_env).get("PREFECT_HOME")
    if args and args[0] in _SERVER_COMMANDS and home and not fresh_prefect_home:
        migrated_prefect_home(Path(home))
    return run_process(command, cwd=cwd, env=env, timeout=timeout, **extra_env)


def migrated_prefect_home(home: Path) -> Path:
    """`home`, with a Prefect database if it had none: a copy of one migrated once per test
    run. Migrating a new one takes a local server ~6 s of CPU, paid otherwise by every test
    that starts one on a PREFECT_HOME of its own; the first start on a truly new home is still
    tested (`fresh_prefect_home`)."""
    database = home / "prefect.db"
    if not database.exists():
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_prefect_template(), database)
    return home


def _prefect_template() -> Path:
    """A migrated, empty Prefect database in the run's folder, made by the first process that
    asks (the others wait for it on a file lock)."""
    import fcntl

    run_dir = Path(os.environ.get(RUN_DIR_VAR) or tempfile.gettempdir())
    template = run_dir / "prefect-template.db"
    with open(run_dir / "prefect-template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if template.exists():
            return template
        home = Path(tempfile.mkdtemp(prefix="prefect-template-home-", dir=run_dir))
        made = run_process(
            [sys.executable, "-c", _MIGRATE_ONCE],
            cwd=REPO,
            env=child_env(PREFECT_HOME=str(home)),
            timeout=300,
        )
        if made.returncode != 0:
            raise RuntimeError(f"no migrated Prefect database:\n{made.stderr[-4000:]}")
        import sqlite3

        partial = template.with_suffix(".partial")
        # Through SQLite, not a file copy: whatever the server left in its WAL is included.
        with (
            contextlib.closing(sqlite3.connect(home / "prefect.db")) as source,
            contextlib.closing(sqlite3.connect(partial)) as copy,
        ):
            source.backup(copy)
        partial.replace(template)
        shutil.rmtree(home, ignore_errors=True)
        return template


# Starting a local server migrates its database; stopping it at once leaves it migrated.
_MIGRATE_ONCE = (
    "from flows.local_server import local_prefect_server\nwith local_prefect_server(): pass"
)


def run_process(
    command: list[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    **extra_env: str,
) -> subprocess.CompletedProcess[str]:
    """Run `command` to its end in a process group of its own, killed with whatever it left
    running (a `postledger`'s local Prefect server, after a crash). `env`: the whole
    environment (default: this one's, see `child_env`), `extra_env` on top. Output goes to
    files: an orphan holding a pipe open could not block the test."""
    environment = child_env(env, **extra_env)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = spawn(
            command, cwd=cwd, env=environment, stdin=subprocess.DEVNULL, stdout=out, stderr=err
        )
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(process)
            out.seek(0)
            err.seek(0)
            raise AssertionError(
                f"`{' '.join(command)}` did not end within {timeout:g} s:\n"
                f"{out.read()[-4000:]}\n{err.read()[-4000:]}"
            ) from None
        finally:
            stop(process)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())
