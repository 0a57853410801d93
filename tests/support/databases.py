"""Fresh PostgreSQL databases for tests (a ledger's, a Prefect server's), each written down in
the run's folder before it is created and dropped by whoever ends last (`tests.support.session`);
those of killed runs, dropped at a later session's start."""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.support.ledger_backend import PG_ADMIN_URL
from tests.support.processes import RUN_DIR_VAR

TEST_DATABASE_PREFIXES = ("postledger_test", "postledger_prefect")
_STAMPED = re.compile(r"^[a-z_]+_(\d{10})_[0-9a-f]{8}$")
_created: dict[str, str] = {}  # name -> libpq admin URL, until dropped
_lock = threading.Lock()  # guards `_created`


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
