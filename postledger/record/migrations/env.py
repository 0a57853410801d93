"""Alembic's entry point. postledger runs migrations itself (`postledger.record.migrate`) and hands
Alembic an open connection; the `alembic` command (for writing a new revision) connects to
POSTLEDGER_DATABASE_URL or the default SQLite ledger."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlmodel import SQLModel

from postledger.record import models  # noqa: F401  (registers the tables for --autogenerate)
from postledger.settings import Settings

config = context.config
connection = config.attributes.get("connection")

if connection is not None:
    context.configure(connection=connection, target_metadata=SQLModel.metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(Settings().resolved_database_url())
    with engine.connect() as own:
        context.configure(connection=own, target_metadata=SQLModel.metadata)
        with context.begin_transaction():
            context.run_migrations()
