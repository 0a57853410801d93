"""How many of a month's posts are in each state, kept as the state machine moves them.

Why: `postledger status`, a run's progress bar (twice a second) and its artifacts ask for these
numbers. Counted from the posts, each answer read a whole month (100 000 rows; on PostgreSQL
every row version a plan had just rewritten). The state machine logs every move of a post from
one state to another; the same moves, summed, are added to the month's rows of `post_counts`
in the same transaction, so the counts are always those of the posts.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import Connection, text

from postledger.record.kinds import PostStatus

# Each state's change added to the month's count, or its first row made: the same statement on
# SQLite (3.24 and later) and PostgreSQL. The state is stored by name, as the ORM stores it.
_ADD = text(
    "INSERT INTO post_counts (month, status, posts) VALUES (:month, :status, :posts) "
    "ON CONFLICT (month, status) DO UPDATE SET posts = post_counts.posts + excluded.posts"
)


class CountChanges:
    """The moves of a transaction's posts, summed by state until they are written."""

    def __init__(self) -> None:
        self._by_status: Counter[PostStatus] = Counter()

    def moved(self, current: str | None, target: str, posts: int = 1) -> None:
        """`posts` posts went from `current` (None: they are new) to `target`."""
        if current == target:
            return
        if current is not None:
            self._by_status[PostStatus(current)] -= posts
        self._by_status[PostStatus(target)] += posts

    def __bool__(self) -> bool:
        return any(self._by_status.values())

    def write(self, connection: Connection, month: str) -> None:
        """Add the changes to the month's counts (a row made for a state the month never had)."""
        changes = [
            {"month": month, "status": status.name, "posts": n}
            for status, n in self._by_status.items()
            if n
        ]
        self._by_status.clear()
        if changes:
            connection.execute(_ADD, changes)
