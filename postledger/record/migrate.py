"""The ledger's schema, made and upgraded by the Alembic revisions in `record/migrations`,
on SQLite and PostgreSQL alike. Every process that opens the ledger for writing upgrades it
first; the upgrade holds the database's own lock, so two workers starting at once run it once.

A new column or table: change `models.py`, then write a revision (see docs/architecture.md)
— `tests/ledger/test_migrations.py` fails while the two disagree.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from postledger.errors import PostledgerError

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Connection, Engine

# SQLAlchemy is imported where it is used: `postledger status` reads the revision without it
# (`postledger.record.plain`).

MIGRATIONS = Path(__file__).parent / "migrations"
# The newest revision in migrations/versions (tests/ledger/test_migrations.py checks it is Alembic's
# head). Known here, Alembic is imported only when a ledger is actually upgraded: every read
# command, and every run of an up-to-date ledger, starts without it.
HEAD = "0019"
_LOCK_KEY = zlib.crc32(b"postledger:migrate")


class SchemaMismatch(PostledgerError):
    """The ledger's schema is not the one this postledger knows (older or newer)."""


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    return HEAD


def current_revision(connection: Connection) -> str | None:
    """The revision the ledger is at (None: not made by Alembic, or empty), as Alembic keeps
    it: the one row of `alembic_version`."""
    from sqlalchemy import inspect, text

    if not inspect(connection).has_table("alembic_version"):
        return None
    found = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(found) > 1:
        raise SchemaMismatch(f"the ledger is at several revisions at once: {sorted(found)}")
    return found[0] if found else None


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Bring the ledger to `revision` (default: the newest); returns the revision it is at."""
    target = head_revision() if revision == "head" else revision
    with engine.connect() as connection:
        if current_revision(connection) == target:
            return target  # the usual case: one read, no lock
    # SQLite: BEGIN IMMEDIATE takes the write lock; PostgreSQL: an advisory lock. Either way
    # a second process waits here, then finds nothing left to do.
    from sqlalchemy import text

    with engine.execution_options(postledger_write=True).begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
        from alembic import command

        config = alembic_config(connection)
        if current_revision(connection) is None and (made := _made_before_alembic(connection)):
            command.stamp(config, made)
        command.upgrade(config, target)
    return target


def _made_before_alembic(connection: Connection) -> str | None:
    """A ledger made before migrations existed: the revision its tables match."""
    from sqlalchemy import inspect

    tables = set(inspect(connection).get_table_names())
    if "posts" not in tables:
        return None  # an empty database
    return "0002" if "month_runs" in tables else "0001"


def check_current(engine: Engine) -> None:
    """For read-only opens, which must not upgrade: say plainly when the schema is not ours."""
    from sqlalchemy import inspect

    with engine.connect() as connection:
        if "posts" not in inspect(connection).get_table_names():
            return  # nothing there yet: reads find nothing
        found = current_revision(connection)
    if (problem := mismatch(found)) is not None:
        raise problem


def mismatch(found: str | None) -> SchemaMismatch | None:
    """What is wrong with a ledger at revision `found` (None: made before migrations), for a
    reader: nothing if it is the newest."""
    if found == HEAD:
        return None
    return SchemaMismatch(
        f"the ledger's schema is at revision {found or 'from before migrations'}, this "
        f"postledger needs {HEAD}: run `postledger setup` (it migrates the ledger, keeping "
        "every record), then try again"
    )
