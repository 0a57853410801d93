"""The month's forecast kept (issue 37): what the month should cost in all, as its latest run
forecast it before sending, for the live bar and `postledger status` to set the spend against.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.helpers import missing

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if missing("forecasts"):
        op.create_table(
            "forecasts",
            sa.Column("month", sa.String(length=7), primary_key=True),
            sa.Column("total", sa.Integer(), nullable=True),
            sa.Column("posts", sa.Integer(), nullable=False),
            sa.Column("made_at", sa.DateTime(timezone=True), nullable=False),
        )


def downgrade() -> None:
    op.drop_table("forecasts")
