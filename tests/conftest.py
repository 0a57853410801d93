"""Shared fixtures: each pytest worker's own local Prefect server (started at the first test
that asks), a real simulator per test over loopback HTTP, a real ledger per test (a SQLite file,
or a fresh PostgreSQL database in the suite's PostgreSQL pass), and the session hooks that end
every process and drop every database the tests started (see `tests/support/`).

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
os.environ.setdefault("POSTLEDGER_TEST_LEDGER_URL", os.environ.get("POSTLEDGER_DATABASE_URL", ""))
os.environ.update(
    {
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # This process's, and its children's: a child `postledger run` starts its local
        # Prefect server here (its database migrated once per worker).
        "PREFECT_HOME": _PREFECT_HOME,
        "PREFECT_LOGGING_LEVEL": "WARNING",
        # Local Prefect servers, started by many tests' subprocesses at once on two busy
        # cores, have been seen to need more than their default 60 s.
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    }
)
for _name in list(os.environ):
    if (_name.startswith("POSTLEDGER_") and not _name.startswith("POSTLEDGER_TEST_")) or (
        _name == "PREFECT_API_URL"
    ):
        del os.environ[_name]

import atexit  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from postledger.ledger import Ledger, open_ledger  # noqa: E402
from tests.support import databases, processes, session  # noqa: E402
from tests.support.ledger_backend import LEDGER_ON_POSTGRES, PG_ADMIN_URL  # noqa: E402
from tests.support.ledgers import assert_post_counts_kept  # noqa: E402
from tests.support.prefect_api import local_prefect_api  # noqa: E402
from tests.support.simulators import SIMULATORS, Sim, fast_timings, start_sim  # noqa: E402

atexit.register(shutil.rmtree, _PREFECT_HOME, ignore_errors=True)


# --- the session: every process ended, every database dropped --------------------------------


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller began the run
        processes.join_run()
    else:
        processes.begin_run()
        databases.drop_leftover_databases()  # of runs killed before they could (over 1 h old)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    # After the session's fixtures were torn down: the simulators kept for reuse, and
    # whatever a test left running.
    SIMULATORS.close()
    processes.end_own_processes(registered_only=not hasattr(session.config, "workerinput"))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        processes.end_own_processes()
        databases.drop_own_databases()
    else:  # last of all, once the workers are gone
        session.end_run()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """With POSTLEDGER_TEST_TIMELINE=FILE, a line per test: when it ran on which worker, and the
    CPU it and the processes it waited for used (to see where a CI run's time goes)."""
    timeline = os.environ.get("POSTLEDGER_TEST_TIMELINE")
    if not timeline:
        yield
        return
    started, before = time.time(), _cpu_seconds()
    yield
    line = {
        "test": item.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "ledger": "postgresql" if LEDGER_ON_POSTGRES else "sqlite",
        "start": round(started, 2),
        "end": round(time.time(), 2),
        "cpu": round(_cpu_seconds() - before, 2),
    }
    with open(timeline, "a") as file:
        file.write(json.dumps(line) + "\n")


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)  # before `-k` and `-m` deselect: every case is seen
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test is marked with its house (`_mark_houses`), so that `-m unit` (`ledger`,
    `flow`) runs one alone.

    The PostgreSQL pass runs what PostgreSQL can decide differently: every test of the ledger
    itself (outside tests/flow/, those using `ledger_url`), and of the whole runs in tests/flow/
    the ones marked `on_postgres`: a month, crashes and takeovers across processes, the lease,
    ledger failures and the spill, the figures read back. The other whole runs check what the
    flow, Prefect or the upstream does; what they write, those runs write here too."""
    _mark_houses(items)
    _group_for_xdist(config, items)
    _check_on_postgres_ids(items)
    if not LEDGER_ON_POSTGRES:
        return
    keep = [item for item in items if _runs_on_postgres(item)]
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


# The houses, by what a test needs, each also a marker of its name: tests/unit/, the pure rules
# (no database file, no server, no subprocess but `git ls-files` to read the code, nothing that
# imports Prefect); tests/ledger/, a real ledger (a SQLite file or PostgreSQL) and maybe a
# simulator, no Prefect; tests/flow/, Prefect (its servers, flows run, or code of the shell
# that imports it).
HOUSES = ("unit", "ledger", "flow")
_TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before xdist starts its workers
def pytest_sessionstart(session: pytest.Session) -> None:
    """A test file below tests/ in none of the houses is refused before anything starts (under
    xdist, a worker's refusal at collection would only be an internal error). The tests
    collected are checked again (`_mark_houses`)."""
    if hasattr(session.config, "workerinput"):
        return
    found = {
        path for pattern in session.config.getini("python_files") for path in _TESTS.rglob(pattern)
    }
    _refuse_houseless(str(path.relative_to(_TESTS.parent)) for path in found if not _house_of(path))


def _house_of(path: Path) -> str | None:
    try:
        parts = path.resolve().relative_to(_TESTS).parts
    except ValueError:  # not under tests/ at all
        return None
    return parts[0] if len(parts) > 1 and parts[0] in HOUSES else None


def _mark_houses(items: list[pytest.Item]) -> None:
    """Each test marked with its house; a test in none of them is refused, so that a new one
    cannot land where `-m` would never select it."""
    houses = {item: _house_of(item.path) for item in items}
    _refuse_houseless(item.nodeid.split("::")[0] for item, house in houses.items() if not house)
    for item, house in houses.items():
        item.add_marker(str(house))


def _refuse_houseless(paths: Iterable[str]) -> None:
    if houseless := sorted(set(paths)):
        raise pytest.UsageError(
            "tests outside tests/unit/, tests/ledger/ and tests/flow/ (move each to the house "
            f"that fits what it needs, see tests/conftest.py): {', '.join(houseless)}"
        )


def _runs_on_postgres(item: pytest.Item) -> bool:
    if "ledger_url" not in getattr(item, "fixturenames", ()):
        return False
    if _house_of(item.path) != "flow":
        return True
    marker = item.get_closest_marker("on_postgres")
    if marker is None:
        return False
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return True
    # Of a parametrized run, the cases named in `ids` (by default its first): the others differ
    # in the fault or the screen, which the SQLite pass covers.
    ids = marker.kwargs.get("ids")
    if ids is None:
        return all(index == 0 for index in callspec.indices.values())
    return str(callspec.id) in ids


def _check_on_postgres_ids(items: list[pytest.Item]) -> None:
    """A case named in `on_postgres(ids=...)` that the test does not have (a typo, a renamed
    case) would silently leave the PostgreSQL pass without it: refused in either pass."""
    named: dict[str, set[str]] = {}
    found: dict[str, set[str]] = {}
    for item in items:
        marker = item.get_closest_marker("on_postgres")
        callspec = getattr(item, "callspec", None)
        if marker is None or callspec is None or "ids" not in marker.kwargs:
            continue
        test = item.nodeid.split("[", 1)[0]
        named.setdefault(test, set()).update(marker.kwargs["ids"])
        found.setdefault(test, set()).add(str(callspec.id))
    for test, ids in named.items():
        if missing := ids - found[test]:
            raise pytest.UsageError(f"{test}: on_postgres names no such case: {sorted(missing)}")


def _xdist_groups(item: pytest.Item) -> set[str]:
    return {str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args}


def _group_for_xdist(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `xdist_group(NAME)` run on one worker (`--dist loadgroup`), as xdist means:
    one `prefect server start` for all the tests that need one, not one per worker. xdist marks
    them by appending `@NAME` to their ids, which pytest 9 no longer reads (`Node._id`, not
    `_nodeid`): done here the way pytest 9 keeps an id."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # a pytest before 9: xdist's own suffix works there
        return

    for item in items:
        names = sorted(_xdist_groups(item))
        if names and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


# --- Prefect ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """This worker's Prefect API for the flows a test runs in its own process: the project's
    local server (`flows/local_server.py`, as `postledger run` starts it), on a PREFECT_HOME of
    its own, started at the first test that asks and stopped at the session's end."""
    with local_prefect_api(tmp_path_factory.mktemp("prefect-api-home")):
        yield


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One `prefect server start` per pytest worker (a `tests.prefect_server.PrefectServer`), on
    a fresh PostgreSQL database where one answers (required under CI), else on SQLite. Tests
    that use it run their flows in child processes with `server.client_env()`."""
    from tests.support.prefect_server import shared_prefect_server

    home = tmp_path_factory.mktemp("prefect-server")
    with shared_prefect_server(home, require_postgres=bool(os.environ.get("CI"))) as server:
        yield server


# --- the ledger ------------------------------------------------------------------------------


@pytest.fixture
def ledger_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """One test's ledger: a SQLite file in its folder or, in the PostgreSQL pass, a fresh
    database holding an empty ledger (`databases.fresh_ledger_database`), dropped afterwards.
    The spill file (R20) goes to the test's folder either way."""
    if not LEDGER_ON_POSTGRES:
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
        monkeypatch.setenv("POSTLEDGER_DATABASE_URL", url)
        yield url
        assert_post_counts_kept(url)
        return
    with databases.fresh_ledger_database(request.getfixturevalue("pg_server")) as url:
        monkeypatch.setenv("POSTLEDGER_SPILL_PATH", str(tmp_path / "ledger.db.spill.jsonl"))
        monkeypatch.setenv("POSTLEDGER_DATABASE_URL", url)
        yield url
        assert_post_counts_kept(url)


@pytest.fixture
def ledger(ledger_url: str) -> Ledger:
    return open_ledger(ledger_url)


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The admin URL of the local PostgreSQL; skipped where there is none (CI must have one)."""
    if not databases.postgres_available(PG_ADMIN_URL):
        if os.environ.get("CI"):
            raise RuntimeError(f"no PostgreSQL at {PG_ADMIN_URL}")
        pytest.skip(f"no PostgreSQL at {PG_ADMIN_URL}")
    return PG_ADMIN_URL


@pytest.fixture
def pg_ledger_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    with databases.fresh_database("postledger_test", pg_server) as url:
        yield url
        assert_post_counts_kept(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
        yield url
        assert_post_counts_kept(url)
        return
    yield request.getfixturevalue("pg_ledger_url")  # checked by that fixture


# --- the simulator ---------------------------------------------------------------------------


@pytest.fixture
def kind() -> str:
    """The upstream's protocol; tests parametrised by kind override it (`UPSTREAM_KINDS`)."""
    return "task_api"


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch, kind: str) -> Iterator[Sim]:
    yield from start_sim(monkeypatch, kind, latency=0.2)


@pytest.fixture
def faulty(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kind: str
) -> Iterator[Sim]:
    """The simulator of the test's upstream `kind`, with the fault plan given as the test's
    (indirect) parameter: a compact spec such as `"create:reset#3"` (`simulator.faults`), or
    a dict of simulator options (`{"latency": 3.0}`). The module's `SIMULATOR` dict gives
    its defaults (latency 0.1 s otherwise)."""
    options: dict[str, Any] = {"latency": 0.1, **getattr(request.module, "SIMULATOR", {})}
    param = getattr(request, "param", None)
    if isinstance(param, dict):
        options.update(param)
    elif param is not None:
        options["faults"] = param
    yield from start_sim(monkeypatch, kind, **options)


@pytest.fixture
def fast_retries(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Quick timings for a module's tests (`simulators.fast_timings`): its `FAST_TIMINGS` dict
    of settings by field name. Used by `pytestmark = pytest.mark.usefixtures(...)`."""
    fast_timings(monkeypatch, **getattr(request.module, "FAST_TIMINGS", {}))
