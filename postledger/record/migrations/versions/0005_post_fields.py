"""Each post's own input fields (issue 18): the keys of its line besides id and text, as
canonical JSON, so that the report can give them back beside the result.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-15
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.helpers import missing

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: existing posts learn their fields at the month's next sync.
    if missing("posts", "fields"):
        op.add_column("posts", sa.Column("fields", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("posts", "fields")
