"""Events are keyed by (month, seq), their only way in (issue 17): the surrogate `id` and the
(entity, entity_id) index go. No read asks for an event by its id or by its entity (a month's
history is read in seq order), yet every event written kept both up to date: a month's sync
and its plan write 100 000 events each, and the two cost as much again as the key itself
(PostgreSQL, 100 000 events by one INSERT … SELECT: ~520 ms with them, ~255 ms without).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "ix_events_entity" in {index["name"] for index in inspector.get_indexes("events")}:
        op.drop_index("ix_events_entity", table_name="events")
    if "id" not in {column["name"] for column in inspector.get_columns("events")}:
        return
    # SQLite cannot change a table's key in place: the batch copies the table.
    with op.batch_alter_table("events", recreate="auto") as events:
        events.drop_constraint("uq_events_month_seq", type_="unique")
        events.drop_column("id")
        events.create_primary_key("pk_events", ["month", "seq"])


def downgrade() -> None:
    with op.batch_alter_table("events", recreate="auto") as events:
        events.drop_constraint("pk_events", type_="primary")
        events.add_column(sa.Column("id", sa.Integer(), sa.Identity(), nullable=False))
        events.create_primary_key("events_pkey", ["id"])
        events.create_unique_constraint("uq_events_month_seq", ["month", "seq"])
    op.create_index("ix_events_entity", "events", ["entity", "entity_id"])
