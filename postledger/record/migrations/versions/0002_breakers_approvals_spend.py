"""Breakers and their history, people's answers, spend, one run per month (issues 4–6);
the fingerprint's parts per post and the exact request first sent per batch (R25).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op

from postledger.record.migrations.enums import add_labels, create_enums, drop_enums, enum
from postledger.record.migrations.helpers import missing

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ENUMS = {
    "question": ("BREAKER", "RECOVERY", "BUDGET"),
    "answer": ("CONTINUE", "STOP", "TIMED_OUT"),
    "breakerlevel": ("NORMAL", "PROBE", "OPEN"),
    "spendstate": ("POSSIBLE", "CONFIRMED", "WASTED", "REFUNDED"),
}


def _when(name: str, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    add_labels("failurekind", "INPUT_CHANGED")
    create_enums(ENUMS)
    level = enum("breakerlevel", *ENUMS["breakerlevel"])
    if missing("approvals"):
        _approvals()
    if missing("breaker_events"):
        _breaker_events(level)
    if missing("breakers"):
        _breakers(level)
    if missing("month_runs"):
        _month_runs()
    if missing("spend"):
        _spend()
    if missing("batches", "request"):
        op.add_column("batches", sa.Column("request", sa.JSON(), nullable=True))
    if missing("posts", "inputs"):
        op.add_column("posts", sa.Column("inputs", sa.JSON(), nullable=True))


def _approvals() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("upstream", sa.String(), nullable=False),
        sa.Column("kind", enum("question", *ENUMS["question"]), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("batch_ids", sa.JSON(), nullable=True),
        sa.Column("poll", sa.Boolean(), nullable=True),
        sa.Column("resubmit", sa.Boolean(), nullable=True),
        _when("used_at", nullable=True),
        sa.Column("flow_run_id", sa.String(), nullable=True),
        sa.Column("prefect_api_url", sa.String(), nullable=True),
        _when("asked_at"),
        sa.Column("answer", enum("answer", *ENUMS["answer"]), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("answered_by", sa.String(), nullable=True),
        _when("answered_at", nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_approvals_month"), "approvals", ["month"], unique=False)


def _breaker_events(level: sa.types.TypeEngine[str]) -> None:
    op.create_table(
        "breaker_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("upstream", sa.String(), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=True),
        sa.Column("from_level", level, nullable=False),
        sa.Column("to_level", level, nullable=False),
        sa.Column("why", sa.Text(), nullable=False),
        _when("at"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_breaker_events_upstream"), "breaker_events", ["upstream"], unique=False
    )


def _breakers(level: sa.types.TypeEngine[str]) -> None:
    op.create_table(
        "breakers",
        sa.Column("upstream", sa.String(), nullable=False),
        sa.Column("level", level, nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        _when("changed_at"),
        sa.PrimaryKeyConstraint("upstream"),
    )


def _month_runs() -> None:
    op.create_table(
        "month_runs",
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        _when("heartbeat_at"),
        sa.PrimaryKeyConstraint("month"),
    )


def _spend() -> None:
    op.create_table(
        "spend",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("batch_id", sa.String(), nullable=False),
        sa.Column("send", sa.Integer(), nullable=False),
        sa.Column("state", enum("spendstate", *ENUMS["spendstate"]), nullable=False),
        sa.Column("estimated_cost", sa.Integer(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.Column("cost", sa.Integer(), nullable=True),
        _when("at"),
        _when("updated_at"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_spend_batch_id"), "spend", ["batch_id"], unique=False)
    op.create_index(op.f("ix_spend_month"), "spend", ["month"], unique=False)


def downgrade() -> None:
    # PostgreSQL cannot drop a member of an enum type: INPUT_CHANGED stays in failurekind.
    op.drop_column("posts", "inputs")
    op.drop_column("batches", "request")
    for table in ("spend", "month_runs", "breakers", "breaker_events", "approvals"):
        op.drop_table(table)
    drop_enums(list(ENUMS))
