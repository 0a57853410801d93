"""The analysis postledger asks for when none is named: a category, a sentiment and a one-line
summary of each post. Written as a user writes one (a pydantic model), and read the same way.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

# The instructions, word for word as every earlier version sent them: a post's fingerprint
# digests them, so the same words keep a month's completed work completed.
DEFAULT_INSTRUCTIONS = (
    "For each post, return one JSON object with its id, a category (one of: question, "
    "complaint, praise, suggestion, news, other), a sentiment (positive, neutral, negative) "
    "and a one-sentence summary. Answer with a JSON list only."
)
# What the fingerprint's "schema" part says for these fields: the version they had before an
# analysis could be chosen, so that ledgers written then stay valid.
DEFAULT_FIELDS_VERSION = "1"


class Category(StrEnum):
    QUESTION = "question"
    COMPLAINT = "complaint"
    PRAISE = "praise"
    SUGGESTION = "suggestion"
    NEWS = "news"
    OTHER = "other"


class Sentiment(StrEnum):
    POSITIVE = "positive"
    NEUTRAL = "neutral"
    NEGATIVE = "negative"


class PostAnalysis(BaseModel):
    model_config = ConfigDict(
        title="post_analysis", json_schema_extra={"description": DEFAULT_INSTRUCTIONS}
    )

    category: Category = Field(description="What kind of post it is.")
    sentiment: Sentiment = Field(description="How the post feels.")
    summary: str = Field(
        min_length=1, max_length=1000, description="One sentence saying what the post says."
    )
