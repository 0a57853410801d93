"""On PostgreSQL, a month's long values are compressed with LZ4, not pglz (issue 36): a
batch's kept request and raw output, a submission's batch ids, a post's text and result.

Why: PostgreSQL compresses a value of over ~2 kB before it stores it. A 100 000-post month
writes ~36 MB of kept requests while it marks its batches running, and ~14 MB of raw outputs
while it settles them, both on the run's critical path. pglz took ~0.7 s of the server's CPU to
compress the requests; LZ4 takes ~0.2 s, for about the same size. Values stored before this
revision keep their pglz form, and both forms are read alike.

Skipped where the server has no LZ4 (built without it, or older than PostgreSQL 14): nothing
changes there. SQLite does not compress.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

LONG_VALUES = (
    ("batches", "request"),
    ("batches", "raw_output"),
    ("submissions", "batch_ids"),
    ("posts", "text"),
    ("posts", "result"),
)


def upgrade() -> None:
    _compress_with("lz4")


def downgrade() -> None:
    _compress_with("pglz")


def _compress_with(method: str) -> None:
    if not _has_lz4():
        return
    for table, column in LONG_VALUES:  # no rewrite: the method applies to values stored next
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION {method}")


def _has_lz4() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return False
    # The setting lists lz4 only when the server was built with it (PostgreSQL 14 and later).
    found = bind.execute(
        sa.text(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
    ).scalar()
    return bool(found)
