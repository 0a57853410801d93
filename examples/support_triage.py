"""A support team's analysis of each post: which product area, how urgent, whether the team
must reply, and one line to read instead of the post.

Run it on the sample month (docs/analysis.md):

    uv run postledger run --month 2026-10 --analysis examples.support_triage:SupportTriage

`support_triage.json` is the same analysis written as a JSON Schema, for those who do not
write Python.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class ProductArea(StrEnum):
    BILLING = "billing"
    SHIPPING = "shipping"
    ACCOUNT = "account"
    APP = "app"
    OTHER = "other"


class Urgency(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    URGENT = "urgent"


class SupportTriage(BaseModel):
    """You triage the posts a support team receives. For each post, say which product area it
    is about, how urgent it is, whether someone from the team should reply, and sum it up in
    one line a person can read instead of the post."""

    model_config = ConfigDict(title="support_triage")

    product_area: ProductArea = Field(description="The part of the product the post is about.")
    urgency: Urgency = Field(
        description="How soon the team should act: urgent when a customer cannot use the "
        "product or pay, high when something is broken, low for praise and news."
    )
    needs_reply: bool = Field(description="Whether someone from the team should answer the post.")
    summary: str = Field(
        min_length=1, max_length=200, description="One line saying what the post says."
    )
