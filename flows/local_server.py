"""A local Prefect server for `postledger run`: Prefect's own API app in a child process on a
free loopback port, like Prefect's ephemeral mode, with one fix for SQLite.

Why the fix: Prefect 3.9 opens the write transactions of its concurrency-limit endpoints
(`/v2/concurrency_limits/increment-with-lease`, …) in SQLite's DEFERRED mode. When another
connection writes between the endpoint's SELECT and its UPDATE (task run records, events, the
other batch releasing its slot), SQLite refuses the read-to-write upgrade at once — the busy
timeout is not consulted — the server answers 503, and the client sleeps 2 s before retrying.
Measured: two `ai-batch` slots kept busy only 30–40 % of the time. Opening every explicit
write transaction with BEGIN IMMEDIATE, as Prefect's own SQLite notes recommend
(`prefect/server/database/configurations.py`, `setup_sqlite`), makes such a writer queue on
the busy timeout instead. Reads are unchanged; PostgreSQL servers are not involved.

One local server per PREFECT_HOME at a time. Each server keeps its concurrency leases in its
own memory, while the `ai-batch` limit's count of taken slots lives in the shared database. A
second local server on the same database would see the first one's slots taken without any
lease it knows, take them for slots leaked by a killed run, free them (flows/slots.py), and let
twice the limit's batches fly. So the server is started only while this process holds an
exclusive lock on a file in PREFECT_HOME (`fcntl.flock`); a second run there is refused at once,
told who holds it and what to do. The kernel drops the lock when its holder dies, however it
dies, so a crashed run never blocks the next one.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from flows.server_logs import plain_server_logs
from processes.children import (
    QuietStop,
    on_unexpected_exit,
    start_child,
    stop_child,
    wait_answering,
    watch_parent,
)


def create_app() -> Any:
    """uvicorn factory: Prefect's server app, with SQLite writes opened IMMEDIATE."""
    watch_parent()  # a private server: it never outlives the run that started it
    logging.getLogger("uvicorn.error").addFilter(QuietStop())  # `--timeout-graceful-shutdown`
    _check_home()
    from prefect.server.api.server import create_app as prefect_app
    from prefect.server.database.configurations import AioSqliteConfiguration

    original = AioSqliteConfiguration.begin_transaction

    def begin_immediately(
        self: AioSqliteConfiguration, session: Any, with_for_update: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[Any]]:
        return original(self, session, with_for_update=True)  # type: ignore[return-value]

    AioSqliteConfiguration.begin_transaction = begin_immediately  # type: ignore[method-assign,assignment]
    _calm_background_worker()
    app = prefect_app(ephemeral=True, final=True)
    plain_server_logs()  # after Prefect's own logging set-up, which the app's creation does
    return app


# How often the server's background worker looks for work. Prefect's is docket's default,
# every 250 ms, which costs an idle server ~3 % of a core. In ephemeral mode it only ever
# gets deletions' log clean-ups and the event vacuum's schedule: none of them is on the
# path of a batch, and none needs to start within seconds.
BACKGROUND_POLL = timedelta(seconds=2)


def _calm_background_worker() -> None:
    """Prefect's server makes its worker as `Worker(docket)`, by the name it imported."""
    from docket import Worker
    from prefect.server.api import background_workers

    class CalmWorker(Worker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("minimum_check_interval", BACKGROUND_POLL)
            kwargs.setdefault("scheduling_resolution", BACKGROUND_POLL)
            super().__init__(*args, **kwargs)

    background_workers.Worker = CalmWorker  # type: ignore[attr-defined]


# Set while the flow talks to this server: it runs no services, so no lease reaper (see
# flows/slots.py), and the flow frees slots that killed runs left taken.
LOCAL_SERVER_FLAG = "POSTLEDGER_LOCAL_PREFECT_SERVER"

# The flow process talks to a server it started itself, on loopback, without TLS or a UI:
# no CSRF token to fetch per client and no log shipping to a UI nobody can open.
CLIENT_SETTINGS = {
    "PREFECT_CLIENT_CSRF_SUPPORT_ENABLED": "false",
    "PREFECT_LOGGING_TO_API_ENABLED": "false",
    LOCAL_SERVER_FLAG: "1",
}
# Prefect builds a verified TLS context for every client it makes, one per task run, and
# loads a whole CA bundle into it: ~30 ms of CPU per batch, on the hand-off from one batch to
# the next, although plain HTTP on 127.0.0.1 never uses it (bench/README.md). Pointed at a
# bundle of one certificate instead, the context costs next to nothing; verification stays
# on, for a server that has no TLS to verify.
CA_FILE_SETTING = "PREFECT_API_SSL_CERT_FILE"


# The file whose lock makes a local server the only one on its PREFECT_HOME's database.
LOCK_FILE_NAME = "postledger-local-server.lock"
# Tells the server child which PREFECT_HOME its parent locked (see `_check_home`).
_LOCKED_HOME = "POSTLEDGER_LOCAL_SERVER_HOME"


class LocalServerBusy(SystemExit):
    """Another process runs a local Prefect server on this PREFECT_HOME.

    A SystemExit carrying its message, as `sys.exit(message)` makes: nothing can go on without
    the server, and a command that does not catch it (`postledger setup`) then ends with exit
    code 1 and the plain message on stderr, not a traceback. `postledger run` catches it to
    print it its own way."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def prefect_home() -> Path:
    """PREFECT_HOME as Prefect resolves it from the environment. Read here, not from Prefect's
    settings: nothing may import Prefect before the server is up (see
    `_startup_timeout_from_environment`). The server child checks that it agrees."""
    return Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser().resolve()


def _check_home() -> None:
    # PREFECT_HOME may also come from a `.env` or `prefect.toml` in the working folder, which
    # the parent does not read: a server whose database is not under the locked folder would
    # be unprotected, so it refuses to start rather than guess.
    locked = os.environ.get(_LOCKED_HOME)
    if not locked:
        return
    from prefect.settings import get_current_settings

    home = Path(get_current_settings().home).expanduser().resolve()
    if home != Path(locked):
        raise RuntimeError(
            f"Prefect's settings put PREFECT_HOME at {home}, but postledger locked {locked} "
            "(PREFECT_HOME in the environment, else ~/.prefect) so that one local server at a "
            f"time uses it; a .env or prefect.toml file in {Path.cwd()}? Set PREFECT_HOME in "
            "the environment instead"
        )


# The PREFECT_HOME whose local-server lock this process holds, while it holds it.
_held: Path | None = None


def holds_local_server() -> bool:
    """True while this process runs the only local Prefect server on its PREFECT_HOME: then
    every slot its database counts was taken through this server, and a slot without a lease
    here is one no live run holds."""
    return _held is not None


@contextmanager
def _only_server_on(home: Path, what: str) -> Iterator[None]:
    """Hold PREFECT_HOME's local-server lock, or raise LocalServerBusy at once."""
    global _held
    home.mkdir(parents=True, exist_ok=True)
    path = home / LOCK_FILE_NAME
    # Never deleted: a process could otherwise lock a file another has just replaced. The fd
    # is not inherited (Python's default, and Popen closes it anyway): an orphaned server
    # child of a killed run must not keep the lock.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LocalServerBusy(_busy_message(home, fd)) from None
        holder = {
            "pid": os.getpid(),
            "since": datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": what,
            "cwd": str(Path.cwd()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        _held = home
        try:
            yield
        finally:
            _held = None
            os.ftruncate(fd, 0)  # still locked: nobody reads a holder that is gone
    finally:
        os.close(fd)  # releases the lock


def _busy_message(home: Path, fd: int) -> str:
    holder: dict[str, Any] = {}
    # The holder writes who it is just after it takes the lock: look again for a moment.
    for _ in range(10):
        try:
            holder = json.loads(os.pread(fd, 1 << 16, 0) or b"{}")
        except ValueError:
            holder = {}
        if holder:
            break
        time.sleep(0.05)
    who = (
        f"process {holder.get('pid')} (`{holder.get('command')}`, in {holder.get('cwd')}) "
        f"since {holder.get('since')}"
        if holder
        else "a process that has not yet written who it is"
    )
    return (
        f"Another postledger process runs the local Prefect server of this Prefect home "
        f"({home}): {who}. A second local server on the same Prefect database would take that "
        "run's batch slots for leaked ones and send more batches at once than the ai-batch "
        "limit allows, so nothing was started. Wait for it to finish, then start this again. "
        "To run both at once, start one real Prefect server (`prefect server start`, in a "
        "terminal of its own) and set PREFECT_API_URL=http://127.0.0.1:4200/api in both "
        "terminals before `postledger run`. (A separate PREFECT_HOME per run would not do: "
        "each would have its own ai-batch limit, and together they would exceed it.)"
    )


STARTUP_TIMEOUT_SETTING = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
DEFAULT_STARTUP_TIMEOUT = 60.0


def _startup_timeout_from_environment() -> float:
    # From the environment, not Prefect's settings: Prefect reads PREFECT_API_URL once, when
    # it is first imported, so nothing imports it before this server is up.
    value = os.environ.get(STARTUP_TIMEOUT_SETTING)
    if not value:
        return DEFAULT_STARTUP_TIMEOUT
    try:
        return float(value)
    except ValueError:
        raise ValueError(
            f"{STARTUP_TIMEOUT_SETTING}={value!r} is not a number of seconds: set it to e.g. 180"
        ) from None


class LocalServer:
    """A local server that was started and may not answer yet. The environment already points
    Prefect's client at it, so Prefect may be imported while it starts; `wait_ready` before the
    first call to it."""

    def __init__(self, process: subprocess.Popen[Any], api_url: str, timeout: float) -> None:
        self.api_url = api_url
        self._process = process
        self._timeout = timeout
        self._ready = False

    def on_unexpected_exit(self, then: Callable[[int], None]) -> None:
        """`then(exit code)` if the server exits before this run stops it."""
        on_unexpected_exit(self._process, then)

    def wait_ready(self) -> str:
        """The API URL, once the server answers; RuntimeError if it does not."""
        if not self._ready:
            if problem := wait_answering(
                self._process, f"{self.api_url}/health", timeout=self._timeout
            ):
                self._process.kill()
                raise RuntimeError(
                    f"the local Prefect server {problem} (on a slow or busy machine, set "
                    f"{STARTUP_TIMEOUT_SETTING} to wait longer)"
                )
            self._ready = True
        return self.api_url


@contextmanager
def local_prefect_server(startup_timeout: float | None = None) -> Iterator[str]:
    """Start the server, point this process's Prefect client at it, stop it afterwards.
    Yields the API URL once the server answers. Prefect's data lives under PREFECT_HOME as in
    ephemeral mode. `startup_timeout`: by default Prefect's own setting for its ephemeral
    server where set, else 60 s."""
    with starting_local_prefect_server(startup_timeout) as server:
        yield server.wait_ready()


@contextmanager
def starting_local_prefect_server(startup_timeout: float | None = None) -> Iterator[LocalServer]:
    """As `local_prefect_server`, without waiting for the server to answer."""
    if startup_timeout is None:
        startup_timeout = _startup_timeout_from_environment()
    home = prefect_home()
    with _only_server_on(home, _command_line()):
        yield from _serve(home, startup_timeout)


def _command_line() -> str:
    name = Path(sys.argv[0]).name if sys.argv else "python"
    if name == "__main__.py":  # `python -m cli`: the `postledger` command by another name
        name = "postledger" if Path(sys.argv[0]).parent.name == "cli" else "python"
    return " ".join([name, *sys.argv[1:]])


def one_certificate(home: Path) -> Path:
    """A CA file of one certificate (the first of certifi's bundle), written once per home."""
    path = home / "postledger-loopback-ca.pem"
    if not path.exists():
        import certifi

        bundle = Path(certifi.where()).read_text(encoding="ascii")
        end = "-----END CERTIFICATE-----"
        first = bundle[bundle.index("-----BEGIN CERTIFICATE-----") : bundle.index(end) + len(end)]
        path.write_text(first + "\n", encoding="ascii")
    return path


def _serve(home: Path, startup_timeout: float) -> Iterator[LocalServer]:
    # The socket is bound here and handed to the server (`--fd`): a port merely found free
    # could be taken by another process before the server binds it, and that process would
    # then answer this run's health checks. Bound first, the URL is known before the server
    # answers, and the client settings can be in place before anything imports Prefect.
    listener = socket.socket()
    # Connections accepted from it inherit this: with Nagle's algorithm on, every answer's body
    # waited for the client's delayed ACK of its headers (~40 ms on each of the many API calls
    # of every task run). uvicorn cannot set it on a socket handed over by its fd.
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    listener.bind(("127.0.0.1", 0))
    port: int = listener.getsockname()[1]
    env = {
        **os.environ,
        _LOCKED_HOME: str(home),
        "PREFECT_UI_ENABLED": "0",
        # A private, throw-away server: it has nothing to report to anyone.
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
    }
    try:
        process = start_child(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "flows.local_server:create_app",
                "--fd",
                str(listener.fileno()),
                "--log-level",
                "error",
                "--lifespan",
                "on",
                # On stop, open connections (this run's idle keep-alives, its events websocket)
                # are not waited for beyond a second: they were seen to hold a stop for 5 s.
                # Requests are done by then; Prefect's own shutdown then runs as usual.
                "--timeout-graceful-shutdown",
                "1",
            ],
            env=env,
            pass_fds=(listener.fileno(),),
        )
    finally:
        listener.close()  # the server has its own copy
    api_url = f"http://127.0.0.1:{port}/api"
    client_settings = {**CLIENT_SETTINGS, CA_FILE_SETTING: str(one_certificate(home))}
    saved = {name: os.environ.get(name) for name in ("PREFECT_API_URL", *client_settings)}
    try:
        os.environ.update({"PREFECT_API_URL": api_url, **client_settings})
        yield LocalServer(process, api_url, startup_timeout)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        stop_child(process)
