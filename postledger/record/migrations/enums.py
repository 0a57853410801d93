"""Enum columns for migrations. PostgreSQL keeps each enum as a type of its own, created once
(several tables share one) and later grown with ADD VALUE; SQLite stores the names as text."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql


def enum(name: str, *labels: str) -> sa.types.TypeEngine[str]:
    """A column type for an enum the migration creates itself (`create_enums`)."""
    return sa.Enum(*labels, name=name).with_variant(
        postgresql.ENUM(*labels, name=name, create_type=False), "postgresql"
    )


def create_enums(types: dict[str, tuple[str, ...]]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name, labels in types.items():
            postgresql.ENUM(*labels, name=name).create(op.get_bind(), checkfirst=True)


def drop_enums(names: list[str]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in names:
            op.execute(f'DROP TYPE IF EXISTS "{name}"')


def add_labels(name: str, *labels: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        for label in labels:
            op.execute(f"ALTER TYPE \"{name}\" ADD VALUE IF NOT EXISTS '{label}'")
