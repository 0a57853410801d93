"""What the tests share, in one place: the `postledger` command in a subprocess, posts files,
free ports, the simulator and its fault plans, quick timings, fresh PostgreSQL databases, the
Prefect API of a pytest worker, and the clean-up that ends every process and drops every
database a test started, however the session ends.

Fixtures live in `tests/conftest.py` and use these; tests import from here, not from
conftest.py nor from one another.

Clean exits. Every child a test starts is started in a process group of its own (`spawn`) and
its group is killed in a `finally` (`stop`, `running`, `postledger`). Behind that, two nets for
what a `finally` never reached (a Ctrl-C at the wrong moment, a pytest worker killed by xdist):
- every pytest process (the xdist controller and each worker) writes its mark,
  `POSTLEDGER_TEST_OWNER=<run id>/<its pid>`, into its environment, and every process started
  from it inherits it, grandchildren (a `postledger run`'s Prefect server) included. At its
  end a process kills what it started and is still registered, then every process bearing its
  own mark; the controller, last of all, every process bearing the run's id (Linux: read from
  /proc/<pid>/environ);
- every database is written down in the run's folder before it is created, and dropped by
  whoever ends last (its creator, else the controller). A session start drops what killed
  runs left behind (older than an hour: another run on this machine may be using the newer).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "data" / "posts" / "2026-10.jsonl"
MONTH = "2026-10"

# --- the ledger under test -------------------------------------------------------------------

# Set by tests/conftest.py from POSTLEDGER_DATABASE_URL before it clears that (or by a bench
# script): the suite's PostgreSQL pass puts every test's ledger on a fresh database there.
LEDGER_UNDER_TEST = os.environ.get("POSTLEDGER_TEST_LEDGER_URL", "")
LEDGER_ON_POSTGRES = LEDGER_UNDER_TEST.startswith("postgresql")
sqlite_ledger_only = pytest.mark.skipif(
    LEDGER_ON_POSTGRES, reason="about SQLite itself (its file, its write lock)"
)
# The cluster the tests create their databases in.
PG_ADMIN_URL = (
    LEDGER_UNDER_TEST
    if LEDGER_ON_POSTGRES
    else os.environ.get(
        "POSTLEDGER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
)


# --- processes -------------------------------------------------------------------------------

OWNER_VAR = "POSTLEDGER_TEST_OWNER"  # "<run id>/<pid of the pytest process that started it>"
RUN_DIR_VAR = "POSTLEDGER_TEST_RUN_DIR"  # the run's folder: its id is the folder's name
# What a pytest worker's own Prefect client runs with (see `local_prefect_api`) that no child
# may inherit: a child `postledger run` starts its own local server, as a user's does.
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
    lifeline, `postledger/children.py`.) `first=signal.SIGKILL`: a death with no chance to
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


@contextlib.contextmanager
def running(args: list[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """`spawn`, and `stop` at exit, whatever the exit."""
    process = spawn(args, **popen)
    try:
        yield process
    finally:
        stop(process)


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


def end_run() -> None:
    """The session leader's last word: every process of the run ended, every database it
    wrote down dropped, its folder removed."""
    end_own_processes()
    if (run := run_id()) is None:
        return
    _kill_marked(lambda value: value.startswith(f"{run}/"))
    run_dir = Path(os.environ[RUN_DIR_VAR])
    for name, admin in _listed_databases(run_dir):
        _drop_database(admin, name)
    shutil.rmtree(run_dir, ignore_errors=True)


# --- PostgreSQL databases ------------------------------------------------------------------

TEST_DATABASE_PREFIXES = ("postledger_test", "postledger_prefect")
_STAMPED = re.compile(r"^[a-z_]+_(\d{10})_[0-9a-f]{8}$")
_created: dict[str, str] = {}  # name -> libpq admin URL, until dropped


def _libpq(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def postgres_available(admin_url: str = PG_ADMIN_URL) -> bool:
    """Whether the PostgreSQL of `admin_url` answers."""
    import psycopg

    try:
        with psycopg.connect(_libpq(admin_url), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


@contextlib.contextmanager
def fresh_database(
    prefix: str = "postledger_test",
    admin_url: str = PG_ADMIN_URL,
    *,
    drivername: str | None = None,
    template: str | None = None,
) -> Iterator[str]:
    """A new PostgreSQL database, empty (or a copy of `template`); yields its URL (the admin
    URL's driver, or `drivername`), and drops it at exit (WITH FORCE: a server still
    connected does not keep it). Named `<prefix>_<unix time>_<random>`: how old a leftover
    is shows in its name."""
    name = _create_database(prefix, admin_url, template)
    try:
        yield _database_url(admin_url, name, drivername)
    finally:
        _drop_database(_libpq(admin_url), name)


def _create_database(prefix: str, admin_url: str, template: str | None = None) -> str:
    import psycopg
    from psycopg import sql

    name = _stamped(prefix)
    admin = _libpq(admin_url)
    _write_down(name, admin)  # before it exists: a kill between the two loses nothing
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(create)
    return name


def _stamped(prefix: str) -> str:
    return f"{prefix}_{int(time.time())}_{uuid.uuid4().hex[:8]}".lower()


def _database_url(admin_url: str, name: str, drivername: str | None = None) -> str:
    from sqlalchemy.engine import make_url

    url = make_url(admin_url).set(database=name)
    if drivername is not None:
        url = url.set(drivername=drivername)
    return url.render_as_string(hide_password=False)


_ledger_templates: dict[str, str] = {}  # admin URL -> this process's template database
# admin URL -> this process's ledger databases that finished tests emptied, for the next ones
_emptied: dict[str, list[str]] = {}


def recount_posts(session: Any) -> None:
    """After a test wrote posts into the ledger directly (as no code of postledger does: the
    state machine moves them), the kept counts made those of the posts, as migration 0012
    first made them."""
    from sqlalchemy import text

    session.execute(text("DELETE FROM post_counts"))
    session.execute(
        text(
            "INSERT INTO post_counts (month, status, posts) "
            "SELECT month, status, count(*) FROM posts GROUP BY month, status"
        )
    )
    session.commit()


def assert_post_counts_kept(url: str) -> None:
    """The counts of posts by state that the state machine keeps (`post_counts`) are those of
    the posts, for every month of the ledger at `url`. Checked at the end of every test that
    has a ledger: whatever it did (crashes, spills, recoveries, bisections), the counts hold.
    A ledger that is not there, cannot be read or is of an older schema is not checked."""
    from postledger.record.migrate import SchemaMismatch
    from postledger.record.plain import LedgerUnreadable, read_only

    try:
        with read_only(url) as reader:
            if reader is None:
                return
            kept = reader.rows("SELECT month, status, posts FROM post_counts WHERE posts <> 0")
            counted = reader.rows("SELECT month, status, count(*) FROM posts GROUP BY 1, 2")
    except (SchemaMismatch, LedgerUnreadable):
        return
    assert sorted(kept) == sorted(counted), f"kept {sorted(kept)}, counted {sorted(counted)}"


@contextlib.contextmanager
def fresh_ledger_database(admin_url: str = PG_ADMIN_URL) -> Iterator[str]:
    """A PostgreSQL database holding an empty ledger of the newest schema; yields its URL.
    For tests whose ledger the suite decides; a test of the migrations themselves takes
    `fresh_database`.

    Made as a copy of a template the migrations made once, and reused: at the test's end
    everyone still connected to it is disconnected (a child the test killed may have left a
    session open) and every table is emptied, and the next test gets it under a new name (so
    that nothing a process keeps per URL, such as `open_ledger`'s ledgers, is shared between
    tests). That costs ~20 ms, where a CREATE DATABASE and a DROP cost a second or more each
    on the busy 2-core machine. All are dropped at the process's end, like every database a
    test made."""
    name = _reused_database(admin_url) or _create_database(
        "postledger_test", admin_url, _template(admin_url)
    )
    try:
        yield _database_url(admin_url, name)
    finally:
        if _emptied_database(_database_url(admin_url, name)):
            _emptied.setdefault(admin_url, []).append(name)
        else:
            _drop_database(_libpq(admin_url), name)


def _reused_database(admin_url: str) -> str | None:
    """An emptied ledger database of this process, renamed as a new one; None if none."""
    import psycopg
    from psycopg import sql

    admin = _libpq(admin_url)
    pool = _emptied.get(admin_url, [])
    while pool:
        old = pool.pop()
        new = _stamped("postledger_test")
        _write_down(new, admin)  # before it exists: a kill between the two loses nothing
        rename = sql.SQL("ALTER DATABASE {} RENAME TO {}")
        try:
            with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
                conn.execute(rename.format(sql.Identifier(old), sql.Identifier(new)))
        except psycopg.Error:
            _drop_database(admin, old)
            continue
        with _lock:
            _created.pop(old, None)
        return new
    return None


def _template(admin_url: str) -> str:
    if (template := _ledger_templates.get(admin_url)) is None:
        from postledger.ledger import Ledger

        template = _create_database("postledger_test_template", admin_url)
        Ledger(_database_url(admin_url, template)).close()
        _ledger_templates[admin_url] = template  # dropped with this process's databases
    return template


def _emptied_database(url: str) -> bool:
    """Every table of the ledger at `url` emptied, its schema as migrated; False if that
    could not be done (then it is dropped instead)."""
    import psycopg

    try:
        with psycopg.connect(_libpq(url), autocommit=True, connect_timeout=5) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            tables = [
                row[0]
                for row in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                    "AND tablename <> 'alembic_version'"
                )
            ]
            if tables:
                listed = ", ".join(f'"{table}"' for table in tables)
                conn.execute(f"TRUNCATE {listed} RESTART IDENTITY CASCADE")
    except psycopg.Error:
        return False
    return True


def _write_down(name: str, admin: str) -> None:
    with _lock:
        _created[name] = admin
    if run_dir := os.environ.get(RUN_DIR_VAR):
        with contextlib.suppress(OSError), open(Path(run_dir) / "databases", "a") as file:
            file.write(json.dumps([name, admin]) + "\n")


def _listed_databases(run_dir: Path) -> list[tuple[str, str]]:
    try:
        lines = (run_dir / "databases").read_text().splitlines()
    except OSError:
        return []
    return [tuple(json.loads(line)) for line in lines if line.strip()]


def _drop_database(admin: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
    except psycopg.Error:
        return  # kept in the list: the session's end tries again
    with _lock:
        _created.pop(name, None)


def drop_own_databases() -> None:
    with _lock:
        left = list(_created.items())
    for name, admin in left:
        _drop_database(admin, name)


def ages_of_test_databases(admin_url: str = PG_ADMIN_URL) -> dict[str, float]:
    """The tests' databases in the cluster now, each with its age in seconds (from its name,
    else from its folder's creation; `inf` when neither can be read)."""
    import psycopg

    ages: dict[str, float] = {}
    with psycopg.connect(_libpq(admin_url), autocommit=True, connect_timeout=3) as conn:
        rows = conn.execute("SELECT datname, oid FROM pg_database").fetchall()
        now = time.time()
        for name, oid in rows:
            if not name.startswith(tuple(f"{p}_" for p in TEST_DATABASE_PREFIXES)):
                continue
            if stamped := _STAMPED.match(name):
                ages[name] = now - int(stamped.group(1))
                continue
            try:  # named before names carried their time: the folder's PG_VERSION file
                (made,) = conn.execute(
                    "SELECT extract(epoch FROM (pg_stat_file(%s)).modification)",
                    (f"base/{oid}/PG_VERSION",),
                ).fetchone() or (None,)
                ages[name] = now - float(made) if made is not None else float("inf")
            except psycopg.Error:
                ages[name] = float("inf")
    return ages


def drop_leftover_databases(older_than: float = 3600.0) -> list[str]:
    """Drop the tests' databases older than `older_than` seconds: left by runs that were
    killed before they could drop them. Newer ones may belong to a run going on now."""
    if not postgres_available():
        return []
    admin = _libpq(PG_ADMIN_URL)
    old = [name for name, age in ages_of_test_databases().items() if age > older_than]
    for name in old:
        _drop_database(admin, name)
    return old


# --- a pytest worker's Prefect API -----------------------------------------------------------


@contextlib.contextmanager
def local_prefect_api(home: Path) -> Iterator[str]:
    """The project's own local Prefect server (`flows/local_server.py`: SQLite writes opened
    BEGIN IMMEDIATE), on its own PREFECT_HOME `home`, with this process's Prefect client
    pointed at it as `postledger run` points its own, threads included. Yields the API URL.

    Only this process talks to it: the server sets PREFECT_API_URL and its client settings in
    the environment; the Prefect ones are given to Prefect's settings here (Prefect was
    imported long before) and taken out of the environment, and `child_env` leaves all of
    them out, so that a child `postledger run` starts its own local server (as a user's does)
    on the worker's PREFECT_HOME, which this server's lock does not hold."""
    import prefect.context
    import prefect.settings
    from prefect.settings import temporary_settings

    from flows.local_server import local_prefect_server

    migrated_prefect_home(home)
    with contextlib.ExitStack() as stack:
        worker_home = os.environ.get("PREFECT_HOME")
        os.environ["PREFECT_HOME"] = str(home)
        try:
            before = dict(os.environ)
            api_url = stack.enter_context(local_prefect_server())
            given = {k: v for k, v in os.environ.items() if before.get(k) != v}
        finally:
            if worker_home is None:
                os.environ.pop("PREFECT_HOME", None)
            else:
                os.environ["PREFECT_HOME"] = worker_home
        _WORKER_ONLY.update(given)
        updates: dict[Any, Any] = {}
        for name, value in given.items():
            if name.startswith("PREFECT_") and hasattr(prefect.settings, name):
                updates[getattr(prefect.settings, name)] = value
                del os.environ[name]
            # (the others, postledger's local-server flag, stay: the flows read them here)
        stack.enter_context(temporary_settings(updates=updates))
        # Threads a test starts see the global settings context, not this thread's.
        stack.enter_context(
            prefect.context._temporary_global_settings_context(
                prefect.context.get_settings_context()
            )
        )
        stack.callback(_drain_events)
        yield api_url


def _drain_events() -> None:
    """Send the events still queued before the server stops (as Prefect's harness does)."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain() -> None:
        result = EventsWorker.drain_all()
        if inspect.isawaitable(result):
            await result

    with contextlib.suppress(Exception):
        run_coro_as_sync(drain())


def ai_batch_slots_taken() -> int:
    """`tag:ai-batch` slots counted as taken by the current Prefect API."""
    from prefect import get_client

    from flows.limits import tag_limit_name

    with get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(tag_limit_name()).active_slots


def task_runs_of(
    flow_run_id: UUID, ready: Callable[[list[Any]], bool], timeout: float = 120.0
) -> list[Any]:
    """A flow run's task runs, once `ready` says they are all there: task runs reach the API
    through events, a little after the flow run itself ended (on a loaded CI machine, the last
    of 40 batches' events have been seen to come more than 30 s late)."""
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


def flow_run_state(flow_run_id: str) -> str:
    """The state type of a flow run on the current Prefect API ("PAUSED", ...)."""
    from prefect import get_client

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(UUID(flow_run_id)).state
        return state.type.value if state else "NONE"


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """`check()`'s first truthy value, looked for every 0.1 s for up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def in_background(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """`target()` in a daemon thread; its result, or the exception it raised, lands in the
    dict as "result" or "error"."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = target()
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


# --- the simulator -------------------------------------------------------------------------

UPSTREAM_KINDS = (
    "task_api",
    "openai_chat",
    "openai_batch",
    "anthropic_messages",
    "anthropic_batch",
)


def fault_cases(kinds: tuple[str, ...], *faults: str | tuple[Any, ...]) -> list[Any]:
    """Parameters for `@pytest.mark.parametrize(("kind", "faulty", ...), ...)`: each fault
    plan (or tuple of a plan and the test's other values) for each of `kinds`."""
    rows = [fault if isinstance(fault, tuple) else (fault,) for fault in faults]
    return [pytest.param(kind, *row, id=f"{kind}-{row[0]}") for kind in kinds for row in rows]


# The tests' calls to their simulators on loopback, through one client: each new httpx client
# (`httpx.get` makes one per call) loads the whole CA bundle into a TLS context, ~30 ms of CPU
# that plain HTTP never uses, and a test asks its simulator several times.
_LOOPBACK = httpx.Client()


class Sim:
    """A running simulator and its evidence endpoints."""

    def __init__(self, url: str) -> None:
        self.url = url

    @property
    def upstream(self) -> str:
        """The name its breaker has in the ledger (its host and port)."""
        return self.url.removeprefix("http://")

    def charges(self) -> list[dict[str, Any]]:
        charges: list[dict[str, Any]] = _LOOPBACK.get(f"{self.url}/_sim/charges").json()["charges"]
        return charges

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = _LOOPBACK.get(f"{self.url}/_sim/stats").json()
        return stats

    def creates(self) -> int:
        return int(self.stats()["requests"].get("create", 0))

    def charged_per_post(self) -> Counter[str]:
        return Counter(pid for charge in self.charges() for pid in charge["post_ids"])

    def fired(self) -> list[dict[str, Any]]:
        """The faults that fired, in order, each with what it hit (`simulator.faults`)."""
        fired: list[dict[str, Any]] = _LOOPBACK.get(f"{self.url}/_sim/faults").json()["fired"]
        return fired

    def set_faults(self, rules: list[dict[str, Any]], seed: int = 0) -> None:
        """A new fault plan in force (its counts start again); `[]`: no more faults."""
        plan = {"seed": seed, "rules": rules}
        _LOOPBACK.post(f"{self.url}/_sim/faults", json=plan).raise_for_status()

    def clear_faults(self) -> None:
        self.set_faults([])

    def hold(self, held: bool) -> None:
        """No task ends while held; released, each ends one latency later."""
        _LOOPBACK.post(f"{self.url}/_sim/hold", json={"held": held}).raise_for_status()


class _Simulators:
    """The simulator processes of this pytest process, each reused test after test: a start
    costs a second of CPU, a reset (`POST /_sim/reset`) next to nothing. What a reset cannot
    change (the API key, the create delay) picks the process; a scenario file gets a new one."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str | None, float], list[str]] = {}
        self._running = contextlib.ExitStack()

    @contextlib.contextmanager
    def lease(
        self,
        *,
        latency: float = 1.0,
        seed: int = 0,
        faults: str | None = None,
        honour_keys: bool = True,
        api_key: str | None = None,
        create_delay: float = 0.0,
        scenario: str | None = None,
    ) -> Iterator[str]:
        from simulator import child

        if scenario is not None:
            options = {"latency": latency, "seed": seed, "faults": faults, "scenario": scenario}
            with child.simulator_process(
                **options,
                honour_keys=honour_keys,
                api_key=api_key,
                create_delay=create_delay,
            ) as url:
                yield url
            return
        kind = (api_key, create_delay)
        url = self._take(kind)
        try:
            reset = {"latency": latency, "seed": seed, "honour_keys": honour_keys, "faults": faults}
            answer = _LOOPBACK.post(f"{url}/_sim/reset", json=reset, timeout=30)
            if answer.status_code == 422:
                raise RuntimeError(f"the simulator did not start (it said {answer.text!r})")
            answer.raise_for_status()
            yield url
        finally:
            self._idle.setdefault(kind, []).append(url)

    def _take(self, kind: tuple[str | None, float]) -> str:
        from simulator import child

        while self._idle.get(kind):
            url = self._idle[kind].pop()
            with contextlib.suppress(httpx.HTTPError):
                if _LOOPBACK.get(f"{url}/_sim/stats", timeout=5).is_success:
                    return url  # (one that died is left to the session's end)
        api_key, create_delay = kind
        return self._running.enter_context(
            child.simulator_process(api_key=api_key, create_delay=create_delay)
        )

    def close(self) -> None:
        self._idle.clear()
        self._running.close()


SIMULATORS = _Simulators()


def simulator_process(**options: Any) -> contextlib.AbstractContextManager[str]:
    """A simulator as if just started with `options` (those of
    `simulator.child.simulator_process`); yields its base URL. One of this process's
    simulators, reset (see `_Simulators`), in a process group of its own."""
    return SIMULATORS.lease(**options)


def start_sim(
    monkeypatch: Any, kind: str = "task_api", **options: Any
) -> Generator[Sim, None, None]:
    """The simulator, and the settings that point at it (a generator, for fixtures to `yield
    from`). `kind` is the upstream's protocol: the task API, or the simulator's OpenAI face
    (`openai_chat`, `openai_batch`: the base URL with its /v1, as the openai SDK takes it) or
    its Anthropic face (`anthropic_messages`: the root, as the anthropic SDK takes it).
    As it honours idempotency keys (unless told not to), the upstream is configured as
    honouring them, as a user would."""
    from postledger.settings import UpstreamKind

    with simulator_process(**options) as url:
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_URL", UpstreamKind(kind).base_url_of(url))
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_KIND", kind)
        honours = str(options.get("honour_keys", True)).lower()
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_IDEMPOTENT", honours)
        yield Sim(url)


def fast_timings(monkeypatch: Any, **settings: str) -> None:
    """Short request back-off and rate-limit wait for tests, plus any other `POSTLEDGER_*`
    setting given by its field name (`poll_wait="0.5"`)."""
    values = {"request_backoff": "0.05", "rate_limit_wait": "1", **settings}
    for name, value in values.items():
        monkeypatch.setenv(f"POSTLEDGER_{name.upper()}", value)


# --- posts files and runs of a month ---------------------------------------------------------


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def posts_file(
    path: Path, n: int, *, ids: str = "p{:03d}", text: str = "Why is the app slow, day {}?"
) -> Path:
    """`n` posts, one JSON object a line: ids and texts from the formats, numbered from 0."""
    return write_jsonl(
        path,
        [json.dumps({"id": ids.format(i), "text": text.format(i)}) for i in range(n)],
    )


def month_posts(tmp_path: Path, n: int) -> str:
    """`n` posts of MONTH in the test's folder (`p000`, ...); the path as text."""
    return str(posts_file(tmp_path / f"{MONTH}.jsonl", n))


def run_flow(tmp_path: Path, n: int, **answers: Any) -> dict[str, Any]:
    """The monthly flow, in this process, on `n` posts of MONTH."""
    from flows.monthly import monthly_posts

    result: dict[str, Any] = monthly_posts(
        month=MONTH, posts_path=month_posts(tmp_path, n), **answers
    )
    return result


def run_month(tmp_path: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`postledger run` of twelve posts of MONTH, in a process of its own, from the test's
    folder (with the worker's PREFECT_HOME: migrated once)."""
    posts = posts_file(
        tmp_path / "posts.jsonl", 12, ids="p{:02d}", text="Login loops back to the start, case {}."
    )
    # `env`'s keys are environment variables: never postledger()'s own keyword arguments.
    return postledger("run", "--month", MONTH, "--posts", str(posts), *flags, cwd=tmp_path, **env)  # type: ignore[arg-type]


def on_worker_server(request: Any) -> dict[str, str]:
    """The environment that points a `postledger run` child at this worker's Prefect server,
    as a deployment's worker points its runs at a shared one: the child starts no local server
    of its own (~10 s of CPU saved per run, most of it importing Prefect's server). For runs
    whose own embedded server is not what the test is about, such as a run that only has to
    crash at a named point. (`request`: the test's, for the server.)"""
    request.getfixturevalue("prefect_harness")
    from prefect.settings import PREFECT_API_URL

    return {"PREFECT_API_URL": str(PREFECT_API_URL.value())}


def finish_month_here(request: Any, tmp_path: Path) -> dict[str, Any]:
    """The next run of the month `run_month` left unfinished (a crash, an unanswered question),
    as the monthly flow in this process, against this worker's Prefect server, with a yes to
    polling and resubmitting given up front. What it finishes and pays is decided by the
    ledger alone; it raises unless every post ended. (`request`: the test's, for the server.)"""
    request.getfixturevalue("prefect_harness")
    from flows.monthly import monthly_posts

    posts_path = str(tmp_path / "posts.jsonl")  # the file `run_month` wrote and read
    summary: dict[str, Any] = monthly_posts(
        month=MONTH, posts_path=posts_path, poll=True, resubmit=True
    )
    return summary


def statuses(ledger: Any, month: str = MONTH) -> Counter[str]:
    return Counter(p.status.value for p in ledger.posts(month))


def assert_attempts_are_charges(ledger: Any, sim: Sim, month: str = MONTH) -> None:
    """For every post: charged upstream tasks that contain it == its business attempts."""
    charged = sim.charged_per_post()
    posts = ledger.posts(month)
    assert {p.post_id: p.attempts for p in posts} == {
        p.post_id: charged.get(p.post_id, 0) for p in posts
    }


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


# --- bad input files (the loader's tests and the flow's) -------------------------------------

GOOD = '{"id": "a", "text": "hello"}'
BAD_FILES: dict[str, tuple[list[str], int, str, str]] = {
    "malformed_json": (
        ['{"id": "a", "text": "hello"}', '{"id": "b", "text": "x"'],
        2,
        "malformed JSON",
        "one JSON object per line",
    ),
    "not_an_object": ([GOOD, '["b", "x"]'], 2, "JSON array instead of an object", "JSON object"),
    "missing_id": ([GOOD, '{"text": "x"}'], 2, 'missing "id"', 'add "id"'),
    "empty_id": ([GOOD, '{"id": "  ", "text": "x"}'], 2, '"id" is', "non-empty"),
    "missing_text": ([GOOD, '{"id": "b"}'], 2, 'missing "text"', 'add "text"'),
    "empty_text": ([GOOD, '{"id": "b", "text": ""}'], 2, '"text" is', "non-empty string"),
    "text_not_string": ([GOOD, '{"id": "b", "text": 42}'], 2, '"text" is 42', "non-empty string"),
    "duplicate_id": (
        [GOOD, '{"id": "b", "text": "x"}', '{"id": "a", "text": "y"}'],
        3,
        'duplicate id "a" (first on line 1)',
        "its own id",
    ),
}


def ledger_snapshot(ledger: Any) -> dict[str, list[tuple[object, ...]]]:
    """The rows of the posts, batches and events tables, in a fixed order."""
    from sqlalchemy import text

    with ledger.engine.connect() as conn:
        return {
            table: [
                tuple(row) for row in conn.execute(text(f"SELECT * FROM {table} ORDER BY 1, 2"))
            ]
            for table in ("posts", "batches", "events")
        }


# --- ledgers of an older schema (the migrations' tests and the ledger's) ---------------------


def ledger_at_baseline(
    url: str,
    *,
    post_id: str = "p1",
    fingerprint: str = "f" * 64,
    status: str = "COMPLETED",
    result: str | None = '{"category": "praise"}',
) -> None:
    """A ledger as issues 2–3 left it (schema revision 0001), holding one post of 2026-10
    whose text is 'hello'."""
    from sqlalchemy import text

    from postledger.record.db import make_engine
    from postledger.record.migrate import upgrade

    engine = make_engine(url)
    upgrade(engine, "0001")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO posts (month, post_id, position, text, fingerprint, status, "
                "attempts, requeues, result, created_at, updated_at) VALUES ('2026-10', :id, 0, "
                "'hello', :fp, :status, 1, 0, :result, :at, :at)"
            ),
            {
                "id": post_id,
                "fp": fingerprint,
                "status": status,
                "result": result,
                "at": "2026-10-02 10:00:00+00",
            },
        )
    engine.dispose()


def _at_exit() -> None:
    SIMULATORS.close()
    end_own_processes()
    drop_own_databases()


atexit.register(_at_exit)


# --- one batch through the ledger alone --------------------------------------------------------


def settle_next_batch(ledger: Any, month: str = MONTH, usage: dict[str, int] | None = None) -> Any:
    """The month's next planned batch through the ledger as the batch task run moves it (intent,
    task id, saved output, validated and applied), with the simulator's model writing a valid
    output and no upstream called: its posts end `completed`. Returns the posts it sent."""
    from postledger.batches.output import check_output
    from postledger.failures.policy import after_output
    from postledger.settings import Limits
    from simulator.model import write_output

    (batch_id,) = ledger.next_to_start(month, 1, set())
    _, sent = ledger.mark_running(batch_id)
    ledger.record_task_id(batch_id, "task_1")
    raw = write_output([(p.post_id, p.text) for p in sent])
    ledger.save_output(batch_id, raw, usage or {"input_tokens": 1, "output_tokens": 2})
    check = check_output(raw, ledger.batch(batch_id).post_ids)
    decision = after_output(ledger.batch(batch_id), ledger.posts_of(batch_id), check, Limits())
    ledger.apply(batch_id, decision, check)
    return sent


# --- a browser for the Prefect UI -------------------------------------------------------------

# Debian's Chromium (`.ci/run` installs it), driven by Playwright: no browser download.
CHROMIUM = "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else shutil.which("chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium installed (`apt-get install chromium`; .ci/run installs it)",
)

# A loaded two-core machine answers a click in seconds, not Playwright's default 5 s for an
# `expect`: every wait in a UI test is given this long.
UI_WAIT_MS = 30_000


@contextlib.contextmanager
def browser_page(playwright: Any, failure_screenshot: Path) -> Iterator[Any]:
    """A headless Chromium page whose every wait (actions and `expect`) lasts `UI_WAIT_MS`;
    a screenshot of the page is left at `failure_screenshot` when the block fails."""
    playwright.expect.set_options(timeout=UI_WAIT_MS)
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(UI_WAIT_MS)
        try:
            yield page
        except Exception:
            page.screenshot(path=str(failure_screenshot), full_page=True)
            raise
        finally:
            browser.close()


# --- what the ledger sends, what a flow logs ------------------------------------------------

WRITES = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


@contextlib.contextmanager
def statements(ledger: Any) -> Iterator[list[tuple[str, Any]]]:
    """Every statement the ledger's engine sends while the block runs, with its parameters."""
    from sqlalchemy import event

    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, sql: str, parameters: Any, *_: Any) -> None:
        seen.append((sql, parameters))

    event.listen(ledger.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(ledger.engine, "before_cursor_execute", record)


@contextlib.contextmanager
def flow_log(caplog: Any) -> Iterator[Callable[[], list[str]]]:
    """The flow's own log lines at INFO and above while the block runs (Prefect's run logger
    does not propagate to caplog's), each once: call the yielded function for them."""
    import logging

    run_log = logging.getLogger("prefect.flow_runs")
    run_log.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="prefect.flow_runs")
    try:
        yield lambda: [r.getMessage() for r in {id(r): r for r in caplog.records}.values()]
    finally:
        run_log.removeHandler(caplog.handler)
