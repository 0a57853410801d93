"""The index by batch holds only posts that are in a batch (issue 17). Every query through it
asks for a batch's posts, yet every post was entered in it: a month's sync put 100 000
pending posts, none in a batch, into it (an entry each, kept up to date by every write).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

NAME = "ix_posts_batch_status_position"
COLUMNS = ["batch_id", "status", "position"]
IN_A_BATCH = sa.text("batch_id IS NOT NULL")


def upgrade() -> None:
    op.drop_index(NAME, table_name="posts")
    op.create_index(NAME, "posts", COLUMNS, sqlite_where=IN_A_BATCH, postgresql_where=IN_A_BATCH)


def downgrade() -> None:
    op.drop_index(NAME, table_name="posts")
    op.create_index(NAME, "posts", COLUMNS)
