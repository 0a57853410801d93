"""Posts lose two indexes that others cover (issue 17): `ix_posts_status` (no query asks by
status without the month or the batch) and `ix_posts_batch_id` (the prefix of
ix_posts_batch_status_position, migration 0006). Every move of a post rewrote its entries in
both: a 100 000-post month's plan, and every batch's start and end, kept four indexes of the
posts table up to date where two serve every query.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

COVERED = {"ix_posts_status": ["status"], "ix_posts_batch_id": ["batch_id"]}


def upgrade() -> None:
    present = {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("posts")}
    for name in COVERED:
        if name in present:
            op.drop_index(name, table_name="posts")


def downgrade() -> None:
    for name, columns in COVERED.items():
        op.create_index(name, "posts", columns)
