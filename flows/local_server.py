"""A local Prefect server for `postledger run`: Prefect's own API app in a child process on a
free loopback port, like Prefect's ephemeral mode, with one fix for SQLite.

Why the fix: Prefect 3.9 opens the write transactions of its concurrency-limit endpoints
(`/v2/concurrency_limits/increment-with-lease`, …) in SQLite's DEFERRED mode. When another
connection writes between the endpoint's SELECT and its UPDATE (task-run records, events, the
other batch releasing its slot), SQLite refuses the read-to-write upgrade at once — the busy
timeout is not consulted — the server answers 503, and the client sleeps 2 s before retrying.
Measured: two `ai-batch` slots kept busy only 30–40 % of the time. Opening every explicit
write transaction with BEGIN IMMEDIATE, as Prefect's own SQLite notes recommend
(`prefect/server/database/configurations.py`, `setup_sqlite`), makes such a writer queue on
the busy timeout instead. Reads are unchanged; PostgreSQL servers are not involved.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any

from postledger.children import stop_child, wait_answering


def create_app() -> Any:
    """uvicorn factory: Prefect's server app, with SQLite writes opened IMMEDIATE."""
    from prefect.server.api.server import create_app as prefect_app
    from prefect.server.database.configurations import AioSqliteConfiguration

    original = AioSqliteConfiguration.begin_transaction

    def begin_immediately(
        self: AioSqliteConfiguration, session: Any, with_for_update: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[Any]]:
        return original(self, session, with_for_update=True)  # type: ignore[return-value]

    AioSqliteConfiguration.begin_transaction = begin_immediately  # type: ignore[method-assign]
    return prefect_app(ephemeral=True, final=True)


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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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


@contextmanager
def local_prefect_server(startup_timeout: float | None = None) -> Iterator[str]:
    """Start the server, point this process's Prefect client at it, stop it afterwards.
    Yields the API URL. Prefect's data lives under PREFECT_HOME as in ephemeral mode.
    `startup_timeout`: by default Prefect's own setting for its ephemeral server where set,
    else 60 s."""
    if startup_timeout is None:
        startup_timeout = _startup_timeout_from_environment()
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_UI_ENABLED": "0",
        # A private, throw-away server: it has nothing to report to anyone.
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "flows.local_server:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "error",
            "--lifespan",
            "on",
        ],
        env=env,
    )
    api_url = f"http://127.0.0.1:{port}/api"
    saved = {name: os.environ.get(name) for name in ("PREFECT_API_URL", *CLIENT_SETTINGS)}
    try:
        if problem := wait_answering(process, f"{api_url}/health", timeout=startup_timeout):
            process.kill()
            raise RuntimeError(
                f"the local Prefect server {problem} (on a slow or busy machine, set "
                f"{STARTUP_TIMEOUT_SETTING} to wait longer)"
            )
        os.environ.update({"PREFECT_API_URL": api_url, **CLIENT_SETTINGS})
        yield api_url
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        stop_child(process)
