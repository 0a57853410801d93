"""The posts named by a range of a month's batches, as rows (batch_id, seq, post_id, place),
read by the database from each batch's own list of post ids (a JSON array).

Why: planning moves every pending post of a month into the batches it has just written. Built
in Python and copied to the database, 100 000 (post id, batch id) pairs cost the plan a third
of its own time; the batches already hold them, and the database stages them itself.
"""

from __future__ import annotations

from sqlalchemy import Integer, Subquery, Text, text
from sqlalchemy.engine import Dialect

# Each dialect's way of turning a JSON array into rows, in order.
_MEMBERS = {
    "postgresql": (
        "SELECT b.batch_id AS batch_id, b.seq AS seq, m.post_id AS post_id, m.place AS place "
        "FROM batches AS b CROSS JOIN LATERAL "
        "json_array_elements_text(b.post_ids) WITH ORDINALITY AS m(post_id, place) "
        "WHERE b.month = :month AND b.seq BETWEEN :first AND :last"
    ),
    "sqlite": (
        "SELECT b.batch_id AS batch_id, b.seq AS seq, m.value AS post_id, m.key AS place "
        "FROM batches AS b, json_each(b.post_ids) AS m "
        "WHERE b.month = :month AND b.seq BETWEEN :first AND :last"
    ),
}


def batch_members(dialect: Dialect, month: str, first: int, last: int) -> Subquery:
    """The posts of the month's batches numbered `first` to `last`, one row each."""
    try:
        sql = _MEMBERS[dialect.name]
    except KeyError:
        raise NotImplementedError(
            f"no ledger on {dialect.name}: use SQLite or PostgreSQL"
        ) from None
    return (
        text(sql)
        .bindparams(month=month, first=first, last=last)
        .columns(batch_id=Text, seq=Integer, post_id=Text, place=Integer)
        .subquery("members")
    )
