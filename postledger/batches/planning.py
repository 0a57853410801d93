"""Batch planning (R7): consecutive posts, at most N posts and C characters per batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sized:
    """What planning needs to know about a post."""

    post_id: str
    chars: int


@dataclass(frozen=True)
class BatchPlan:
    batches: list[list[str]] = field(default_factory=list)
    # Posts that alone exceed max_chars: they can never be sent, so they are never planned.
    too_long: list[Sized] = field(default_factory=list)


def plan_batches(posts: Sequence[Sized], *, max_posts: int, max_chars: int) -> BatchPlan:
    """Fill batches greedily in the given order; the same input always gives the same plan."""
    if max_posts < 1 or max_chars < 1:
        raise ValueError("max_posts and max_chars must be at least 1")
    plan = BatchPlan()
    current: list[str] = []
    current_chars = 0
    for post in posts:
        if post.chars > max_chars:
            plan.too_long.append(post)
            continue
        if current and (len(current) == max_posts or current_chars + post.chars > max_chars):
            plan.batches.append(current)
            current, current_chars = [], 0
        current.append(post.post_id)
        current_chars += post.chars
    if current:
        plan.batches.append(current)
    return plan
