"""Indexes for a big month (issue 17): a batch's next steps find the month's queued batches in
start order, and planning the month's pending posts in file order, without reading the whole
table.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_batches_month_status_seq": ("batches", ["month", "status", "seq"]),
    "ix_posts_month_status_position": ("posts", ["month", "status", "position"]),
}


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    for name, (table, columns) in INDEXES.items():
        if name not in {index["name"] for index in inspector.get_indexes(table)}:
            op.create_index(name, table, columns)


def downgrade() -> None:
    for name, (table, _) in INDEXES.items():
        op.drop_index(name, table_name=table)
