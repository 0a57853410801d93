"""A batch finds its own posts through an index on the batch (issue 17): with only the month's
(month, status, position) index, SQLite's planner, which has no statistics on a ledger nobody
ANALYZEd, read every queued post of the month to find a batch's 25, once per batch: 25 ms a
batch at 100 000 posts, and growing with the month.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

NAME = "ix_posts_batch_status_position"


def upgrade() -> None:
    if NAME not in {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("posts")}:
        op.create_index(NAME, "posts", ["batch_id", "status", "position"])


def downgrade() -> None:
    op.drop_index(NAME, table_name="posts")
