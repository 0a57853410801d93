"""No index by batch on the posts (issue 17). A batch keeps its own post ids; its posts are
looked up by key among them. The index cost every post an entry when a month was planned and
a new one at each move of its batch: on PostgreSQL a third of the plan's one UPDATE.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

NAME = "ix_posts_batch_status_position"
COLUMNS = ["batch_id", "status", "position"]
IN_A_BATCH = sa.text("batch_id IS NOT NULL")


def upgrade() -> None:
    op.drop_index(NAME, table_name="posts")


def downgrade() -> None:
    op.create_index(NAME, "posts", COLUMNS, sqlite_where=IN_A_BATCH, postgresql_where=IN_A_BATCH)
