"""Spend by class of token (issue 37): the input a call read from the provider's prompt cache
(`spend.cached_input_tokens`) and wrote to it (`spend.cache_write_tokens`), each billed at its
own rate. A row settled before this revision has neither: its input was billed as fresh.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.helpers import missing

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for column in ("cached_input_tokens", "cache_write_tokens"):
        if missing("spend", column):
            op.add_column("spend", sa.Column(column, sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("spend", "cache_write_tokens")
    op.drop_column("spend", "cached_input_tokens")
