"""Engines and the per-month write lock (R5).

SQLite: WAL so readers never block the writer, `BEGIN IMMEDIATE` so a write transaction takes
the database's write lock at its start (two processes serialize instead of failing half-way),
and a process-local lock per month so threads of one process queue up without busy-waiting.
PostgreSQL: a transaction-scoped advisory lock per month, so writers on several machines
serialize too.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlmodel import Session, SQLModel

from postledger import models  # noqa: F401  (registers the tables)

SQLITE_BUSY_TIMEOUT_MS = 30_000


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def make_engine(url: str, *, read_only: bool = False) -> Engine:
    """An engine for the ledger at `url`; `read_only` opens SQLite so that nothing can write."""
    if not is_sqlite(url):
        return create_engine(url, pool_pre_ping=True)
    database = make_url(url).database
    if read_only and database and database != ":memory:":
        engine = create_engine(
            f"sqlite:///file:{database}?mode=ro&uri=true",
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        )
    else:
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        )
    _configure_sqlite(engine, read_only=read_only)
    return engine


def _configure_sqlite(engine: Engine, *, read_only: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when a transaction begins.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        if not read_only:
            cursor.execute("PRAGMA journal_mode = WAL")
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


def create_schema(engine: Engine) -> None:
    SQLModel.metadata.create_all(engine)


class MonthLocks:
    """Serializes writes to one month's records (R5), within a process and across processes."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def _local(self, month: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(month, threading.Lock())

    @contextmanager
    def session(self, month: str) -> Iterator[Session]:
        """A session whose transaction holds the month's write lock until it commits."""
        with self._local(month):
            bind = self._engine.execution_options(postledger_write=True)
            with Session(bind, expire_on_commit=False) as session:
                if not self._sqlite:
                    key = zlib.crc32(f"postledger:{month}".encode())
                    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
                else:
                    session.connection()  # BEGIN IMMEDIATE now, not at the first statement
                yield session
                session.commit()
