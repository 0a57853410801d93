"""A running Batch API job's progress (issue 36): the counts its upstream last reported while
it ran (`submissions.upstream_counts`, in one shape for every provider) and when they were
seen (`submissions.counts_seen_at`). `postledger status` shows them without a network call;
they are only shown, never decided from. Submissions made before this revision have none.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.helpers import missing

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if missing("submissions", "upstream_counts"):
        op.add_column("submissions", sa.Column("upstream_counts", sa.JSON(), nullable=True))
    if missing("submissions", "counts_seen_at"):
        op.add_column(
            "submissions", sa.Column("counts_seen_at", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    op.drop_column("submissions", "counts_seen_at")
    op.drop_column("submissions", "upstream_counts")
