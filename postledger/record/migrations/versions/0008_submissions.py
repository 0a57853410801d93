"""Submissions (issue 16): one upstream job on a Batch API carries many ledger batches. The
`submissions` table records each before the upstream is called; a batch names the submission
that sent it last.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.helpers import missing

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if missing("batches", "submission_id"):
        op.add_column("batches", sa.Column("submission_id", sa.String(), nullable=True))
    if missing("submissions"):
        op.create_table(
            "submissions",
            sa.Column("submission_id", sa.String(), nullable=False),
            sa.Column("month", sa.String(length=7), nullable=False),
            sa.Column("idempotency_key", sa.String(), nullable=False),
            sa.Column("batch_ids", sa.JSON(), nullable=False),
            sa.Column("metadata_sent", sa.JSON(), nullable=False),
            sa.Column("upstream_job_id", sa.String(), nullable=True),
            sa.Column("file_id", sa.String(), nullable=True),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("submission_id"),
        )
        op.create_index("ix_submissions_month", "submissions", ["month"])


def downgrade() -> None:
    op.drop_index("ix_submissions_month", table_name="submissions")
    op.drop_table("submissions")
    op.drop_column("batches", "submission_id")
