"""A real `prefect server start` for tests, and a fresh PostgreSQL database to run it on.

The ephemeral server of `prefect_test_harness` serves no UI and runs none of the server's
services (pause expiry, lease reaper, scheduler, late runs). Tests that need them — a browser
on the UI, a deployment picked up by a worker — start a real server with this module:

    from tests.support.prefect_server import fresh_postgres_database, running_prefect_server

    with fresh_postgres_database("myprefix") as db_url, running_prefect_server(
        tmp_path / "prefect-home", db_url
    ) as api_url:
        env = prefect_client_env(api_url, tmp_path / "prefect-home")
        subprocess.run([...], env=env)            # a flow, a worker, `prefect deploy`, ...

`tests/conftest.py` has a session fixture, `prefect_server`, that starts one such server (a
`PrefectServer`, via `shared_prefect_server`) for all the tests of a pytest worker that ask.

`running_prefect_server` yields the API URL (`http://127.0.0.1:PORT/api`); the UI is served at
the same origin (`ui_url(api_url)`). The server's output goes to `home/server.log` (read it when
a test fails; a pipe nobody reads could fill and stall the server). At exit the server's whole
process group is stopped, and its database dropped (`tests/support/session.py` does both at the
session's end too, if a test never got there). Without `database_url` the server uses SQLite
under `home`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from processes.children import wait_answering
from tests.support import databases, processes
from tests.support.databases import postgres_available
from tests.support.processes import free_port

# Where the tests' PostgreSQL is (same variable and default as tests/conftest.py).
PG_ADMIN_URL = os.environ.get(
    "POSTLEDGER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)

LEASE_STORAGE = "prefect.server.concurrency.lease_storage.filesystem"


def ui_url(api_url: str) -> str:
    """The UI's base URL of a server whose API is at `api_url`."""
    return api_url.removesuffix("/").removesuffix("/api")


def prefect_client_env(api_url: str, home: Path | None = None) -> dict[str, str]:
    """`os.environ` for a child process (flow, worker, CLI) that talks to the server (not
    what only a pytest worker's own Prefect client uses: `processes.child_env`)."""
    env = processes.child_env(
        PREFECT_API_URL=api_url, DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false"
    )
    if home is not None:
        env["PREFECT_HOME"] = str(home)
    return env


def server_log(home: Path) -> str:
    """What the server of `home` has written so far (its last 20 000 characters)."""
    path = home / "server.log"
    return path.read_text(encoding="utf-8", errors="replace")[-20_000:] if path.exists() else ""


@contextmanager
def running_prefect_server(
    home: Path,
    database_url: str | None = None,
    *,
    startup_timeout: float = 120.0,
    extra_env: dict[str, str] | None = None,
) -> Iterator[str]:
    """Start `prefect server start` (UI on, services on) on a free loopback port; yield its API
    URL once `/api/health` answers; stop its whole process group at exit.

    `home` becomes the server's `PREFECT_HOME` (created if missing): its SQLite database when
    `database_url` is None, its UI build, its concurrency leases (filesystem lease storage, so
    a restart keeps them) and `server.log`. `database_url` is an async SQLAlchemy URL such as
    `postgresql+asyncpg://postgres@127.0.0.1:5432/name` (see `fresh_postgres_database`).
    `extra_env` is added last (e.g. `PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED`).
    """
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = {
        name: value
        for name, value in processes.child_env().items()
        # Never inherit a client's target or another server's database.
        if name not in ("PREFECT_API_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL")
        and not name.startswith("PREFECT_API_DATABASE_")
    }
    env.update(
        {
            "PREFECT_HOME": str(home),
            "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_UI_ENABLED": "true",
            "PREFECT_SERVER_UI_API_URL": api_url,  # what the browser calls
            "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
            "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": LEASE_STORAGE,
            "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
        }
    )
    if database_url is not None:
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = database_url
    env.update(extra_env or {})
    args = [
        sys.executable,
        "-m",
        "prefect",
        "server",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ui",
    ]
    with open(home / "server.log", "ab") as log:
        # Its own process group: stopped as one at exit.
        process = processes.spawn(
            args, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        if problem := wait_answering(process, f"{api_url}/health", timeout=startup_timeout):
            raise RuntimeError(
                f"prefect server at {api_url} {problem}; its log:\n{server_log(home)}"
            )
        yield api_url
    finally:
        processes.stop(process, timeout=15)


@contextmanager
def fresh_postgres_database(
    prefix: str = "prefect_test", admin_url: str = PG_ADMIN_URL
) -> Iterator[str]:
    """Create an empty PostgreSQL database, yield its `postgresql+asyncpg://` URL (for a Prefect
    server), and drop it at exit (with FORCE: a server still connected does not keep it).

    `admin_url` is any SQLAlchemy or libpq URL of the cluster (user and host are kept, the
    database is replaced). Raises `psycopg.OperationalError` when PostgreSQL is unreachable;
    `postgres_available()` tells beforehand.
    """
    with databases.fresh_database(prefix, admin_url, drivername="postgresql+asyncpg") as url:
        yield url


@dataclass(frozen=True)
class PrefectServer:
    """A running server: its API URL, its PREFECT_HOME, and the database it runs on."""

    api_url: str
    home: Path
    database: str  # "postgresql" or "sqlite"

    @property
    def ui_url(self) -> str:
        return ui_url(self.api_url)

    def log(self) -> str:
        return server_log(self.home)

    def client_env(self, home: Path | None = None) -> dict[str, str]:
        return prefect_client_env(self.api_url, home)


@contextmanager
def shared_prefect_server(home: Path, *, require_postgres: bool = False) -> Iterator[PrefectServer]:
    """A server on a fresh PostgreSQL database where one answers (dropped at exit), else on
    SQLite under `home`; with `require_postgres`, no PostgreSQL is an error."""
    database: AbstractContextManager[str | None] = nullcontext(None)
    if postgres_available(PG_ADMIN_URL):
        database = fresh_postgres_database("postledger_prefect")
    elif require_postgres:
        raise RuntimeError(f"no PostgreSQL at {PG_ADMIN_URL}")
    with database as url, running_prefect_server(home, url) as api_url:
        yield PrefectServer(api_url, home, "sqlite" if url is None else "postgresql")
