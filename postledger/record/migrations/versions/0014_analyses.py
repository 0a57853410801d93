"""The analyses the posts were asked (issue 35): a user defines the fields each post gets, and
the report reads each result by the analysis that produced it. Posts keep the analysis's
version in their fingerprint's parts already ("schema"); this keeps what the version means.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.helpers import missing

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if missing("analyses"):
        op.create_table(
            "analyses",
            sa.Column("version", sa.String(length=64), nullable=False),
            sa.Column("name", sa.String(), nullable=False),
            sa.Column("document", sa.Text(), nullable=False),
            sa.Column("first_used", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("version"),
        )


def downgrade() -> None:
    op.drop_table("analyses")
