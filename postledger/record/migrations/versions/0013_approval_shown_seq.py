"""An answer about interrupted batches covers them as they were shown: the month's last event
number at that moment is kept with it (`approvals.shown_seq`). A batch with a later event of
its own changed since (still in flight then, sent again, its task found) and is asked about
again. Answers kept before this revision have none, and cover nothing: the run asks again.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.helpers import missing

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if missing("approvals", "shown_seq"):
        op.add_column("approvals", sa.Column("shown_seq", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("approvals", "shown_seq")
