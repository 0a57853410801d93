"""A month's post counts kept as rows (issue 17). `postledger status`, a run's progress bar
(twice a second) and its artifacts counted a month's posts by state at every look: 100 000 rows
read each time, on PostgreSQL every row version a plan had just rewritten. The state machine
now keeps the counts as it moves posts; here they start from the posts as they are. The sums
of retries read only the few posts that were retried or requeued, through a partial index.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.enums import enum
from postledger.record.migrations.helpers import missing

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

POST_STATUSES = ("PENDING", "QUEUED", "WAITING", "RUNNING", "RECEIVED", "COMPLETED", "FAILED")
INDEX = "ix_posts_retried"
RETRIED = sa.text("attempts > 1 OR requeues > 0")


def upgrade() -> None:
    # A ledger made before migrations were kept may have it all already (see 0002).
    if missing("post_counts"):
        _post_counts()
    indexes = {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("posts")}
    if INDEX not in indexes:
        op.create_index(INDEX, "posts", ["month"], sqlite_where=RETRIED, postgresql_where=RETRIED)


def _post_counts() -> None:
    op.create_table(
        "post_counts",
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("status", enum("poststatus", *POST_STATUSES), nullable=False),
        sa.Column("posts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("month", "status"),
    )
    op.execute(
        "INSERT INTO post_counts (month, status, posts) "
        "SELECT month, status, count(*) FROM posts GROUP BY month, status"
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="posts")
    op.drop_table("post_counts")
