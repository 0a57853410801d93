"""The ledger read through its database's own driver, without the ORM.

A read command answers in a fraction of a second this way: importing SQLAlchemy and SQLModel
takes longer than `postledger status` takes to read a month of 100 000 posts. Every query
given to a `Reader` is plain SQL with `?` placeholders, the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from postledger.defaults import backend_of, sqlite_file
from postledger.errors import PostledgerError
from postledger.record.migrate import SchemaMismatch, mismatch

if TYPE_CHECKING:
    from sqlalchemy import Engine

DATABASE_URL_VARIABLE = "POSTLEDGER_DATABASE_URL"


class LedgerUnreadable(PostledgerError):
    """The ledger's database could not be read; the message says why and what to do."""


def database_url_from_environment() -> str | None:
    """POSTLEDGER_DATABASE_URL as the settings read it (the name in any case; empty is unset)."""
    wanted = DATABASE_URL_VARIABLE.lower()
    return next((v for k, v in os.environ.items() if k.lower() == wanted), None) or None


def unusable(reason: str) -> str:
    """What to say of a ledger database that failed to answer `reason`."""
    if "locked" in reason:  # SQLite's: another process holds the write lock
        return (
            f"the ledger is busy ({reason}): another postledger is writing to it; try again "
            "in a moment"
        )
    return (
        f"the ledger's database cannot be used ({reason}): check POSTLEDGER_DATABASE_URL (or "
        "the ledger block) and that the database is running"
    )


class Reader:
    """One look at the ledger through a DB-API connection."""

    def __init__(self, connection: Any, *, postgres: bool) -> None:
        self._connection = connection
        self._postgres = postgres

    def rows(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        # No query here has a literal `?` or `%`: the placeholders are all there is to convert.
        cursor = self._connection.cursor()
        try:
            cursor.execute(sql.replace("?", "%s") if self._postgres else sql, params)
            return [tuple(row) for row in cursor.fetchall()]
        finally:
            cursor.close()

    def stream(self, sql: str, *params: object, size: int = 10_000) -> Iterator[tuple[Any, ...]]:
        """The rows `size` at a time, never all held at once (a month's posts are a million):
        on PostgreSQL through a server-side cursor, which the client would otherwise buffer
        whole. Read it to its end before the next query."""
        cursor = (
            self._connection.cursor(name=f"postledger_{uuid.uuid4().hex}")
            if self._postgres
            else self._connection.cursor()
        )
        try:
            cursor.execute(sql.replace("?", "%s") if self._postgres else sql, params)
            while batch := cursor.fetchmany(size):
                yield from (tuple(row) for row in batch)
        finally:
            cursor.close()

    def run(self, sql: str) -> None:
        """A statement that returns no rows (a transaction's settings)."""
        cursor = self._connection.cursor()
        try:
            cursor.execute(sql)
        finally:
            cursor.close()

    def one(self, sql: str, *params: object) -> tuple[Any, ...]:
        return self.rows(sql, *params)[0]

    def tables(self, *names: str) -> set[str]:
        """Those of the tables that exist."""
        marks = ", ".join("?" for _ in names)
        if self._postgres:
            found = self.rows(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                f"current_schema() AND table_name IN ({marks})",
                *names,
            )
        else:
            found = self.rows(
                f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks})",
                *names,
            )
        return {name for (name,) in found}


def when(value: datetime | str | None) -> datetime | None:
    """A stored time as timezone-aware UTC (SQLite keeps it as text with no zone)."""
    if value is None:
        return None
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def stamped(value: datetime | str) -> datetime:
    """A time from a NOT NULL column, as timezone-aware UTC."""
    moment = when(value)
    assert moment is not None
    return moment


@contextmanager
def read_only(url: str) -> Iterator[Reader | None]:
    """The ledger at `url`, opened so that nothing can be written, in one snapshot. None when
    there is nothing to read yet (no SQLite file, or no tables). A schema this postledger does
    not know raises `SchemaMismatch`; a database that does not answer, `LedgerUnreadable`."""
    backend = backend_of(url)
    if backend == "sqlite":
        opened = _sqlite(sqlite_file(url))
    elif backend.startswith("postgres"):
        opened = _postgres(url)
    else:
        raise LedgerUnreadable(
            f"a ledger on {backend!r} cannot be read: the ledger is SQLite or PostgreSQL"
        )
    with opened as reader:
        tables = reader.tables("posts", "alembic_version") if reader is not None else set()
        if reader is None or "posts" not in tables:
            yield None
            return
        found = reader.rows("SELECT version_num FROM alembic_version") if len(tables) == 2 else []
        if len(found) > 1:
            revisions = sorted(row[0] for row in found)
            raise SchemaMismatch(f"the ledger is at several revisions at once: {revisions}")
        if (problem := mismatch(found[0][0] if found else None)) is not None:
            raise problem
        yield reader


@contextmanager
def _unreadable_on(errors: type[Exception]) -> Iterator[None]:
    """The driver's `errors` said in one line, as `LedgerUnreadable`."""
    try:
        yield
    except errors as exc:
        reason = (str(exc).strip().splitlines() or ["no answer"])[0]
        raise LedgerUnreadable(unusable(reason)) from None


@contextmanager
def _sqlite(database: str | None) -> Iterator[Reader | None]:
    import sqlite3

    if database is None or not Path(database).is_file():
        yield None  # looking creates nothing
        return
    with _unreadable_on(sqlite3.Error):
        connection = sqlite3.connect(
            f"file:{quote(database)}?mode=ro", uri=True, isolation_level=None, timeout=30
        )
    try:
        with _unreadable_on(sqlite3.Error):
            connection.execute("BEGIN")  # one snapshot for every query of this look
            yield Reader(connection, postgres=False)
    finally:
        connection.close()


def _connect_arguments(url: str) -> dict[str, Any]:
    """psycopg's keyword arguments for a SQLAlchemy PostgreSQL URL, decoded as SQLAlchemy
    decodes it (a password with a bare `%` is taken as it is, never shown in an error)."""
    parts = urlsplit(url)
    arguments: dict[str, Any] = dict(parse_qsl(parts.query))
    named = {
        "host": parts.hostname,
        "port": parts.port,
        "user": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
        "dbname": unquote(parts.path.lstrip("/")) or None,
    }
    arguments.update({key: value for key, value in named.items() if value is not None})
    return arguments


@contextmanager
def _postgres(url: str) -> Iterator[Reader | None]:
    import psycopg

    with _unreadable_on(psycopg.Error):
        connection = psycopg.connect(**_connect_arguments(url))
    try:
        with _unreadable_on(psycopg.Error):
            connection.read_only = True
            connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # one snapshot
            yield Reader(connection, postgres=True)
    finally:
        connection.close()


@contextmanager
def through(engine: Engine) -> Iterator[Reader]:
    """A `Reader` over a connection of the ledger's own engine (a process that has it open)."""
    connection = engine.raw_connection()
    postgres = engine.dialect.name == "postgresql"
    reader = Reader(connection, postgres=postgres)
    try:
        with _unreadable_on(engine.dialect.loaded_dbapi.Error):
            # One snapshot for every query of this look: the engine's SQLite connections
            # autocommit; its PostgreSQL ones read committed.
            if postgres:
                reader.run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            else:
                reader.run("BEGIN")
            yield reader
    finally:
        connection.rollback()
        connection.close()
