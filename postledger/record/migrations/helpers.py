"""What revisions share beyond enums: a look at what a ledger already has."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def missing(table: str, column: str | None = None) -> bool:
    """Ledgers made before migrations, or between releases, may hold some of a revision's
    tables and columns already (they are stamped at the revision they match least): only what
    is missing is made."""
    inspector = sa.inspect(op.get_bind())
    if table not in inspector.get_table_names():
        return True
    return column is not None and column not in {c["name"] for c in inspector.get_columns(table)}
