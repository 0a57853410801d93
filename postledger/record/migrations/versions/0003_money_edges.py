"""The money edges (issue 14): each post's split and extra attempts, each batch's upstream,
sender and gateway retries, and the spill records already imported.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.helpers import missing

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


COLUMNS: dict[tuple[str, str], sa.Column[object]] = {
    ("posts", "extra_attempts"): sa.Column(
        "extra_attempts", sa.Integer(), nullable=False, server_default="0"
    ),
    ("posts", "split"): sa.Column("split", sa.Boolean(), nullable=False, server_default=sa.false()),
    ("batches", "upstream"): sa.Column("upstream", sa.String(), nullable=True),
    ("batches", "sent_by"): sa.Column("sent_by", sa.String(), nullable=True),
    ("batches", "gateway_retries"): sa.Column(
        "gateway_retries", sa.Integer(), nullable=False, server_default="0"
    ),
}


def upgrade() -> None:
    for (table, name), column in COLUMNS.items():
        if missing(table, name):
            op.add_column(table, column)
    # A ledger from before this revision: the halves it made are split already.
    op.execute(
        "UPDATE posts SET split = TRUE WHERE batch_id IN "
        "(SELECT batch_id FROM batches WHERE split_from IS NOT NULL)"
    )
    if missing("spill_imports"):
        _spill_imports()


def _spill_imports() -> None:
    op.create_table(
        "spill_imports",
        sa.Column("record_id", sa.String(), nullable=False),
        sa.Column("batch_id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("record_id"),
    )


def downgrade() -> None:
    op.drop_table("spill_imports")
    op.drop_column("batches", "gateway_retries")
    op.drop_column("batches", "sent_by")
    op.drop_column("batches", "upstream")
    op.drop_column("posts", "split")
    op.drop_column("posts", "extra_attempts")
