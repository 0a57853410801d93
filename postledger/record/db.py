"""Engines and the per-month write lock (R5).

SQLite: WAL so readers never block the writer, `BEGIN IMMEDIATE` so a write transaction takes
the database's write lock at its start (two processes serialize instead of failing half-way),
and a process-local lock per month so threads of one process queue up without busy-waiting.
PostgreSQL: a transaction-scoped advisory lock per month (and one for the breakers), nothing
process-local, so writers on several machines serialize in the database.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Insert,
    Integer,
    MetaData,
    Select,
    Table,
    Text,
    Update,
    create_engine,
    event,
    insert,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from postledger.defaults import SQLITE_BUSY_TIMEOUT
from postledger.errors import PostledgerError
from postledger.record import models  # noqa: F401  (registers the tables)
from postledger.record.copy_text import converted, copy_lines


class LedgerUnavailable(PostledgerError):
    """A write to the ledger failed (locked past its timeout, disk full, read-only file,
    connection lost). No new batch may start (R20); the message says what failed."""


def safe_url(url: str) -> str:
    """The URL as it may be shown: never with its password."""
    return make_url(url).render_as_string(hide_password=True)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def make_engine(
    url: str, *, read_only: bool = False, busy_timeout: float = SQLITE_BUSY_TIMEOUT
) -> Engine:
    """An engine for the ledger at `url`; `read_only` opens SQLite so that nothing can write."""
    if not is_sqlite(url):
        engine = create_engine(url, pool_pre_ping=True)
        if engine.dialect.driver == "psycopg":
            event.listen(engine, "connect", _send_lists_binary)
        return engine
    database = make_url(url).database
    connect_args = {"check_same_thread": False, "timeout": busy_timeout}
    if read_only and database and database != ":memory:":
        engine = create_engine(
            f"sqlite:///file:{database}?mode=ro&uri=true", connect_args=connect_args
        )
    else:
        engine = create_engine(url, connect_args=connect_args)
    _configure_sqlite(engine, read_only=read_only, busy_timeout_ms=int(busy_timeout * 1000))
    return engine


def _send_lists_binary(dbapi_connection: Any, _record: Any) -> None:
    """psycopg sends a list parameter (an `= ANY` array of post ids, a column of values to
    `unnest`) in text format unless told otherwise, escaping each element with a regular
    expression in Python: ~60 ms for one chunk's 6 000 answers, ~1.6 s of a 100 000-post
    month's settle. In binary each element is copied as it is (~2 ms)."""
    from psycopg.types.array import ListBinaryDumper

    dbapi_connection.adapters.register_dumper(list, ListBinaryDumper)


def _configure_sqlite(engine: Engine, *, read_only: bool, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when a transaction begins.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        if not read_only:
            _use_wal(cursor, busy_timeout_ms / 1000)
            # NORMAL is durable across application crashes in WAL mode; only an OS crash or
            # power loss can lose the last commits, and the ledger replays from the upstream then.
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # Readers take a snapshot; writers take the write lock up front (see module docstring).
        immediate = connection.get_execution_options().get("postledger_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _use_wal(cursor: Any, timeout: float) -> None:
    """Put the file in WAL mode. On a new file that other connections open at the same moment
    (workers starting together), SQLite answers "database is locked" at once, without waiting
    on its busy timeout, while one of them changes the mode or holds the write lock of the
    still rollback-journal file: so wait for that here, as long as the busy timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def create_schema(engine: Engine) -> None:
    """Create or upgrade the ledger's tables (Alembic revisions, `postledger.record.migrate`)."""
    from postledger.record.migrate import upgrade

    upgrade(engine)


BREAKERS = "breakers"  # the lock scope of every breaker and approval: they are global


class WriteLocks:
    """Serializes writes to one scope — a month's records (R5), or the breakers — within a
    process and across processes. A transaction that needs a month and the breakers takes the
    month first, then the breakers (`also`): one order everywhere, so no deadlock."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def _local(self, scope: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(scope, threading.Lock())

    @contextmanager
    def session(self, scope: str) -> Iterator[Session]:
        """A session whose transaction holds the scope's write lock until it commits."""
        # PostgreSQL: the advisory lock alone serializes, across threads, processes and machines.
        # SQLite: threads of this process queue here instead of busy-waiting on the file lock.
        with self._local(scope) if self._sqlite else nullcontext():
            bind = self._engine.execution_options(postledger_write=True)
            try:
                with Session(bind, expire_on_commit=False) as session:
                    if self._sqlite:
                        session.connection()  # BEGIN IMMEDIATE now, not at the first statement
                    else:
                        self.also(session, scope)
                    yield session
                    session.commit()
            except (DBAPIError, OSError) as exc:
                # Not retried here: the caller stops starting work and keeps what it holds.
                cause = getattr(exc, "orig", None) or exc
                raise LedgerUnavailable(
                    f"cannot write the ledger at {safe_url(str(self._engine.url))}: "
                    f"{type(cause).__name__}: {cause}"
                ) from exc

    def also(self, session: Session, scope: str) -> None:
        """Take a second scope's lock in an open write transaction. SQLite needs nothing: its
        IMMEDIATE transaction already holds the one database-wide write lock."""
        if not self._sqlite:
            key = zlib.crc32(f"postledger:{scope}".encode())
            session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


# Rows per executemany (and ids per IN list) of the bulk writes: keeps one statement's
# parameters small in memory, and an IN list under every database's limit of bound values.
CHUNK = 5_000

T = TypeVar("T")


# Rows written at once after which PostgreSQL's statistics of the ledger are refreshed.
REFRESH_STATISTICS_AFTER = 10_000


def refresh_statistics(engine: Engine, written: int) -> None:
    """After `written` rows went in at once, PostgreSQL's planner statistics brought up to
    date (ANALYZE samples a few thousand rows: well under a second at a million).

    Without them a month's posts just copied in are planned for as a table PostgreSQL has
    never seen: it takes the month for 0.5 % of its rows, and reads a chunk's posts by
    scanning the whole month instead of looking each up by its key. Every settle of a chunk
    then read the month (37 000 pages at 200 000 posts): a million-post month took 48
    minutes. Autovacuum would analyze the table too, but only after its own delay. SQLite
    plans these reads by the key without statistics: nothing to do there."""
    if written < REFRESH_STATISTICS_AFTER or engine.dialect.name != "postgresql":
        return
    with engine.connect() as connection:
        connection.execute(text("ANALYZE posts, batches"))
        connection.commit()


def chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """`items` a CHUNK at a time."""
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


def insert_many(connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT `rows` (dicts with the same keys) into `table`: on PostgreSQL by one COPY (an
    executemany of INSERTs runs the statement once per row on the server), elsewhere see
    `execute_many`."""
    if not rows:
        return
    if copies_rows(connection):
        with _copy_stream(connection, table, list(rows[0])) as write:
            write(rows)
    else:
        execute_many(connection, insert(table), rows, keys=list(rows[0]))


@contextmanager
def rows_into(
    connection: Connection, table: Table
) -> Iterator[Callable[[Sequence[Mapping[str, Any]]], None]]:
    """A function that inserts rows (dicts with the same keys) into `table`, a chunk per call,
    all of them by one statement stream: on PostgreSQL one COPY, open until this ends, fed by a
    thread of psycopg's, so that the server inserts a chunk while the caller builds the next
    (a COPY per chunk waited for the server at the end of each: a month's sync spent as long
    waiting as building). Nothing else may run on `connection` meanwhile. Elsewhere, an
    executemany per chunk."""
    if not copies_rows(connection):
        yield lambda rows: insert_many(connection, table, rows)
        return
    with ExitStack() as stack:
        copy: Callable[[Sequence[Mapping[str, Any]]], None] | None = None

        def write(rows: Sequence[Mapping[str, Any]]) -> None:
            nonlocal copy
            if not rows:
                return
            if copy is None:  # the COPY names its columns: opened with the first rows
                copy = stack.enter_context(
                    _copy_stream(connection, table, list(rows[0]), queued=True)
                )
            copy(rows)

        yield write


@contextmanager
def _copy_stream(
    connection: Connection, table: Table, keys: list[str], *, queued: bool = False
) -> Iterator[Callable[[Sequence[Mapping[str, Any]]], None]]:
    """One COPY into `table`'s `keys`, open while this lasts; each call writes rows to it
    (`queued`: handed to a thread that sends them, and the call returns at once).
    Each value goes through its column's bind processor first, so it arrives as an INSERT
    would send it (enum names, JSON), and is written as COPY's text in the same pass
    (`copy_text`)."""
    import psycopg
    from psycopg import sql
    from psycopg.copy import QueuedLibpqWriter

    dialect = connection.dialect
    processors = [table.c[key].type.dialect_impl(dialect).bind_processor(dialect) for key in keys]
    command = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table.name), sql.SQL(", ").join(map(sql.Identifier, keys))
    )
    driver = connection.connection.driver_connection
    assert driver is not None
    try:
        with driver.cursor() as cursor:
            writer = QueuedLibpqWriter(cursor) if queued else None
            with cursor.copy(command, writer=writer) as copy:

                def write(rows: Sequence[Mapping[str, Any]]) -> None:
                    columns = [[row[key] for row in rows] for key in keys]
                    copy.write(copy_lines(columns, processors))

                yield write
    except psycopg.Error as exc:
        # As SQLAlchemy raises it for a statement of its own: a ledger write that failed.
        raise DBAPIError.instance(command.as_string(driver), None, exc, psycopg.Error) from exc


def copies_rows(connection: Connection) -> bool:
    """Whether bulk writes on this connection go through COPY (PostgreSQL with psycopg)."""
    return connection.dialect.name == "postgresql" and connection.dialect.driver == "psycopg"


# A bulk move's rows (its order, post id, why, batch), staged for one UPDATE to join and one
# INSERT … SELECT to log: an executemany of 100 000 UPDATEs by key is 100 000 statements (on
# PostgreSQL, 100 000 on the server), and 100 000 events bound one by one in Python.
# Temporary, so each connection has its own, emptied at every commit on PostgreSQL and by each
# move before it fills it.
STAGED_MOVES = Table(
    "postledger_staged_moves",
    MetaData(),
    Column("n", Integer, primary_key=True),
    Column("pid", Text),
    Column("why", Text),
    Column("into", Text),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DELETE ROWS",
)


def staged_moves(connection: Connection, rows: Sequence[Mapping[str, Any]]) -> Table:
    """`rows` (keys n, the row's place in the move, then pid and why) in `STAGED_MOVES`, in
    the open transaction: by COPY on PostgreSQL, an executemany a chunk at a time elsewhere."""
    _empty_staged_moves(connection)
    with rows_into(connection, STAGED_MOVES) as insert_rows:
        for chunk in chunks(rows):
            insert_rows(chunk)
    return STAGED_MOVES


def staged_from(connection: Connection, rows: Select[Any]) -> Table:
    """The rows of `rows` (columns n, pid, why, into) in `STAGED_MOVES`, in the open
    transaction, by one INSERT … SELECT: a move the database can name by itself."""
    _empty_staged_moves(connection)
    connection.execute(insert(STAGED_MOVES).from_select(["n", "pid", "why", "into"], rows))
    return STAGED_MOVES


def _empty_staged_moves(connection: Connection) -> None:
    STAGED_MOVES.create(connection, checkfirst=True)
    connection.execute(STAGED_MOVES.delete())  # an earlier move of the same transaction


def execute_many(
    connection: Connection,
    statement: Insert | Update,
    rows: Sequence[Mapping[str, Any]],
    *,
    keys: Sequence[str] | None = None,
) -> int:
    """Run `statement` once per row of `rows` (each a value per bound parameter the statement
    leaves open; `keys`: the columns an INSERT fills) in one executemany on the driver.

    What SQLAlchemy's own executemany does, without its per-row parameter bookkeeping, which
    cost ~80 % of writing a month's 100 000 posts and their events: the statement is compiled
    once, each parameter's bind processor (enum names, JSON, UTC datetimes) is looked up once,
    and the driver gets plain tuples or dicts. Returns the rows changed (the drivers sum an
    executemany's counts)."""
    if not rows:
        return 0
    dialect = connection.dialect
    compiled = statement.compile(dialect=dialect, column_keys=list(keys) if keys else None)
    constants = compiled.params  # the values the statement itself binds
    process = {
        name: bind.type.dialect_impl(dialect).bind_processor(dialect)
        for name, bind in compiled.binds.items()
    }

    names = list(compiled.positiontup or []) if compiled.positional else list(constants)
    # Column by column: one bind processor call per value, no per-value function of our own.
    columns = [_bound_column(rows, name, constants, process.get(name)) for name in names]
    if compiled.positional:
        parameters: list[Any] = list(zip(*columns, strict=True))
    else:
        parameters = [
            dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)
        ]
    return int(connection.exec_driver_sql(str(compiled), parameters).rowcount)


def _bound_column(
    rows: Sequence[Mapping[str, Any]],
    name: str,
    constants: Mapping[str, Any],
    processor: Callable[[Any], Any] | None,
) -> list[Any]:
    """The values of parameter `name` for every row, as the driver takes them. None too goes
    through the processor: a JSON column stores it as JSON null, as the ORM does."""
    if name not in rows[0]:  # bound by the statement itself, the same for every row
        value = constants[name]
        return [value if processor is None else processor(value)] * len(rows)
    return _processed([row[name] for row in rows], processor)


def _processed(values: list[Any], processor: Callable[[Any], Any] | None) -> list[Any]:
    """`values` as the driver takes them."""
    return values if processor is None else converted(values, processor)
