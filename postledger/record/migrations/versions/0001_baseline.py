"""Baseline: posts, batches and the event log (the ledger as issues 2 and 3 left it).

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.enums import create_enums, drop_enums, enum

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

FAILURE_KINDS = (
    "TOO_LONG",
    "INVALID_ITEM",
    "MISSING_ITEM",
    "BATCH_INVALID",
    "UPSTREAM_FAILED",
    "TASK_UNKNOWN",
    "TRANSPORT",
    "REJECTED",
    "RATE_LIMITED",
    "AUTH",
    "QUOTA",
    "PERMISSION",
    "ATTEMPTS_EXHAUSTED",
)
ENUMS = {
    "batchstatus": ("QUEUED", "RUNNING", "RECEIVED", "COMPLETED", "FAILED", "CANCELLED"),
    "charge": ("NONE", "POSSIBLE", "CONFIRMED"),
    "failurekind": FAILURE_KINDS,
    "entitykind": ("POST", "BATCH"),
    "poststatus": (
        "PENDING",
        "QUEUED",
        "WAITING",
        "RUNNING",
        "RECEIVED",
        "COMPLETED",
        "FAILED",
    ),
}


def _when(name: str, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    create_enums(ENUMS)
    op.create_table(
        "batches",
        sa.Column("batch_id", sa.String(), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("post_ids", sa.JSON(), nullable=False),
        sa.Column("status", enum("batchstatus", *ENUMS["batchstatus"]), nullable=False),
        sa.Column("split_from", sa.String(), nullable=True),
        sa.Column("idempotency_key", sa.String(), nullable=False),
        sa.Column("upstream_task_id", sa.String(), nullable=True),
        sa.Column("sends", sa.Integer(), nullable=False),
        sa.Column("charge", enum("charge", *ENUMS["charge"]), nullable=False),
        _when("not_before", nullable=True),
        sa.Column("raw_output", sa.Text(), nullable=True),
        sa.Column("usage", sa.JSON(), nullable=True),
        sa.Column("request_retries", sa.Integer(), nullable=False),
        sa.Column("failure_kind", enum("failurekind", *FAILURE_KINDS), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        _when("created_at"),
        _when("started_at", nullable=True),
        _when("finished_at", nullable=True),
        _when("updated_at"),
        sa.PrimaryKeyConstraint("batch_id"),
    )
    op.create_index(op.f("ix_batches_month"), "batches", ["month"], unique=False)
    op.create_index(op.f("ix_batches_status"), "batches", ["status"], unique=False)
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("entity", enum("entitykind", *ENUMS["entitykind"]), nullable=False),
        sa.Column("entity_id", sa.String(), nullable=False),
        sa.Column("from_status", sa.String(), nullable=True),
        sa.Column("to_status", sa.String(), nullable=False),
        sa.Column("why", sa.Text(), nullable=False),
        _when("at"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("month", "seq", name="uq_events_month_seq"),
    )
    op.create_index("ix_events_entity", "events", ["entity", "entity_id"], unique=False)
    op.create_table(
        "posts",
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("post_id", sa.String(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("status", enum("poststatus", *ENUMS["poststatus"]), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("requeues", sa.Integer(), nullable=False),
        sa.Column("batch_id", sa.String(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("failure_kind", enum("failurekind", *FAILURE_KINDS), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        _when("not_before", nullable=True),
        _when("created_at"),
        _when("updated_at"),
        sa.PrimaryKeyConstraint("month", "post_id"),
    )
    op.create_index(op.f("ix_posts_batch_id"), "posts", ["batch_id"], unique=False)
    op.create_index(op.f("ix_posts_status"), "posts", ["status"], unique=False)


def downgrade() -> None:
    op.drop_table("posts")
    op.drop_table("events")
    op.drop_table("batches")
    drop_enums(list(ENUMS))
