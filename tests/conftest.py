"""Shared fixtures: a session-wide Prefect test harness, a real simulator per test over
loopback HTTP, and a real SQLite ledger file per test.

The environment is fixed before Prefect is imported, so nothing reaches the network or the
home folder.
"""

from __future__ import annotations

import os
import tempfile

_PREFECT_HOME = tempfile.mkdtemp(prefix="postledger-prefect-home-")
# The suite's second pass puts every test's ledger on PostgreSQL:
#   POSTLEDGER_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test uv run pytest
# (each test then gets a fresh database on that server, dropped afterwards).
# Kept in a variable of its own, which is not cleared below: xdist's workers start after this
# file has run in the controller, and inherit its environment.
_LEDGER_UNDER_TEST = os.environ.setdefault(
    "POSTLEDGER_TEST_LEDGER_URL", os.environ.get("POSTLEDGER_DATABASE_URL", "")
)
LEDGER_ON_POSTGRES = _LEDGER_UNDER_TEST.startswith("postgresql")
os.environ.update(
    {
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_HOME": _PREFECT_HOME,
        "PREFECT_LOGGING_LEVEL": "WARNING",
        # `postledger run`'s local server, started by many tests' subprocesses at once on two
        # busy cores, has been seen to need more than its default 60 s.
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    }
)
for _name in list(os.environ):
    if (_name.startswith("POSTLEDGER_") and not _name.startswith("POSTLEDGER_TEST_")) or (
        _name == "PREFECT_API_URL"
    ):
        del os.environ[_name]

import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402
from uuid import UUID  # noqa: E402

import httpx  # noqa: E402
import pytest  # noqa: E402

from postledger.ledger import Ledger, open_ledger  # noqa: E402
from simulator.server import simulator_process  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def ledger_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """One test's ledger: a SQLite file in its folder or, in the PostgreSQL pass, a fresh
    database. The spill file (R20) goes to the test's folder either way."""
    if LEDGER_ON_POSTGRES:
        url: str = request.getfixturevalue("pg_ledger_url")
        monkeypatch.setenv("POSTLEDGER_SPILL_PATH", str(tmp_path / "ledger.db.spill.jsonl"))
    else:
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    monkeypatch.setenv("POSTLEDGER_DATABASE_URL", url)
    return url


sqlite_ledger_only = pytest.mark.skipif(
    LEDGER_ON_POSTGRES, reason="about SQLite itself (its file, its write lock)"
)


def ledger_text(url: str) -> str:
    """Every row of every table of a ledger, as text: to search it for what must not be there."""
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(url)
    rows = []
    with engine.connect() as connection:
        for table in inspect(connection).get_table_names():
            rows += [str(row) for row in connection.execute(text(f'SELECT * FROM "{table}"'))]
    engine.dispose()
    return "\n".join(rows)


@pytest.fixture
def ledger(ledger_url: str) -> Ledger:
    return open_ledger(ledger_url)


class Sim:
    """A running simulator and its evidence endpoints."""

    def __init__(self, url: str) -> None:
        self.url = url

    def charges(self) -> list[dict[str, Any]]:
        charges: list[dict[str, Any]] = httpx.get(f"{self.url}/_sim/charges").json()["charges"]
        return charges

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = httpx.get(f"{self.url}/_sim/stats").json()
        return stats


def start_sim(monkeypatch: pytest.MonkeyPatch, **options: Any) -> Iterator[Sim]:
    """The simulator, and the settings that point at it: as it honours idempotency keys
    (unless told not to), the upstream is configured as honouring them, as a user would."""
    with simulator_process(**options) as url:
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_URL", url)
        honours = str(options.get("honour_keys", True)).lower()
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_IDEMPOTENT", honours)
        yield Sim(url)


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    yield from start_sim(monkeypatch, latency=0.2)


def fast_timings(monkeypatch: pytest.MonkeyPatch, **settings: str) -> None:
    """Short request back-off and rate-limit wait for tests, plus any other `POSTLEDGER_*`
    setting given by its field name (`poll_wait="0.5"`)."""
    values = {"request_backoff": "0.05", "rate_limit_wait": "1", **settings}
    for name, value in values.items():
        monkeypatch.setenv(f"POSTLEDGER_{name.upper()}", value)


def ai_batch_slots_taken() -> int:
    """`tag:ai-batch` slots counted as taken by the current Prefect API."""
    from prefect import get_client

    from flows.limits import tag_limit_name

    with get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(tag_limit_name()).active_slots


def task_runs_of(
    flow_run_id: UUID, ready: Callable[[list[Any]], bool], timeout: float = 30.0
) -> list[Any]:
    """A flow run's task runs, once `ready` says they are all there: task runs reach the API
    through events, a little after the flow run itself ended."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    flow_run = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(flow_run_filter=flow_run)
            if ready(runs):
                return runs
            assert time.monotonic() < deadline, [run.name for run in runs]
            time.sleep(0.2)


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --- PostgreSQL: the ledger's other backend ------------------------------------------------

PG_ADMIN_URL = (
    _LEDGER_UNDER_TEST
    if LEDGER_ON_POSTGRES
    else os.environ.get(
        "POSTLEDGER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
)


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The admin URL of the local PostgreSQL; skipped where there is none (CI must have one)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no PostgreSQL at {PG_ADMIN_URL} ({type(exc).__name__})")
    finally:
        engine.dispose()
    return PG_ADMIN_URL


@contextmanager
def fresh_pg_database(admin_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database (its URL), dropped at exit."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"postledger_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def pg_ledger_url(pg_server: str) -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    with fresh_pg_database(pg_server) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def any_ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    url: str = request.getfixturevalue("pg_ledger_url")
    return url


def start_openai_sim(monkeypatch: pytest.MonkeyPatch, kind: str, **options: Any) -> Iterator[Sim]:
    """The simulator, configured as an OpenAI upstream (`openai_chat` or `openai_batch`):
    the base URL with its /v1, as the openai SDK takes it."""
    for sim in start_sim(monkeypatch, **options):
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_KIND", kind)
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_URL", f"{sim.url}/v1")
        yield sim


# --- a real Prefect server (UI, services), for the tests that need one -------------------------


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One `prefect server start` per pytest worker (a `tests.prefect_server.PrefectServer`), on
    a fresh PostgreSQL database where one answers (required under CI), else on SQLite. Tests
    that use it run their flows in child processes with `server.client_env()`."""
    from tests.prefect_server import shared_prefect_server

    home = tmp_path_factory.mktemp("prefect-server")
    with shared_prefect_server(home, require_postgres=bool(os.environ.get("CI"))) as server:
        yield server


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The PostgreSQL pass runs the tests whose ledger it decides (those using `ledger_url`),
    the ones that run postledger in other processes (crashes, restarts, a real server)
    included; the others would run exactly as in the SQLite pass."""
    if not LEDGER_ON_POSTGRES:
        return
    keep = [item for item in items if "ledger_url" in getattr(item, "fixturenames", ())]
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
