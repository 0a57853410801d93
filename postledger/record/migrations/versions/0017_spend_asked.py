"""What each send asked (issue 37), for the budget's estimate to learn per model: the model and
the upstream kind (`spend.model`, `spend.kind`), and the posts and characters it carried
(`spend.asked_posts`, `spend.asked_chars`). A row written before this revision has none of them
and is not learned from.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.helpers import missing

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

COLUMNS = (
    ("model", sa.String()),
    ("kind", sa.String()),
    ("asked_posts", sa.Integer()),
    ("asked_chars", sa.Integer()),
)


def upgrade() -> None:
    for column, kind in COLUMNS:
        if missing("spend", column):
            op.add_column("spend", sa.Column(column, kind, nullable=True))
    indexes = {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("spend")}
    if "ix_spend_model_id" not in indexes:
        op.create_index("ix_spend_model_id", "spend", ["model", "id"])


def downgrade() -> None:
    op.drop_index("ix_spend_model_id", table_name="spend")
    for column, _ in reversed(COLUMNS):
        op.drop_column("spend", column)
