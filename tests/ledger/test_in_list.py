"""`any_of`: `column IN values` as one parameter, on both ledgers. It finds exactly the rows
named, ids a JSON array or an array literal must escape included, and its statement is the same
whatever the count (SQLite's driver keeps every distinct statement compiled, with its values:
an IN list per count held tens of MB of a big month's run)."""

from __future__ import annotations

from sqlalchemy import create_engine, event, select
from sqlalchemy.engine import Engine
from sqlmodel import Session

from postledger.record.in_list import any_of
from postledger.record.models import PostRecord

# What a JSON array (quotes, backslashes, control and non-ASCII characters) or a PostgreSQL
# array literal (braces, commas, NULL) must escape, and ids that differ only in case or in a
# trailing space.
IDS = ['"', "\\", "{a}", "a,b", "NULL", "é\u2028x", "'", "tab\t", "Ab", "ab", "ab ", "数"]


def _posts(engine: Engine, ids: list[str]) -> None:
    """A posts table holding these ids."""
    table = PostRecord.__table__  # type: ignore[attr-defined]
    PostRecord.metadata.create_all(engine, tables=[table])
    with Session(engine) as session:
        session.add_all(
            PostRecord(month="2026-10", post_id=post_id, position=n, text="t", fingerprint="f")
            for n, post_id in enumerate(ids)
        )
        session.commit()


def test_any_of_finds_exactly_the_rows_named(any_ledger_url: str) -> None:
    engine = create_engine(any_ledger_url)
    _posts(engine, [*IDS, *(f"p{n}" for n in range(3000))])
    table = PostRecord.__table__  # type: ignore[attr-defined]
    asked = [*IDS[::2], "not there", *(f"p{n}" for n in range(0, 3000, 7))]
    with engine.connect() as connection:
        found = (
            connection.execute(
                select(table.c.post_id).where(any_of(connection, table.c.post_id, asked))
            )
            .scalars()
            .all()
        )
        none = (
            connection.execute(
                select(table.c.post_id).where(any_of(connection, table.c.post_id, []))
            )
            .scalars()
            .all()
        )
    engine.dispose()
    assert sorted(found) == sorted(set(asked) - {"not there"})
    assert none == []


def test_its_statement_is_the_same_whatever_the_count(any_ledger_url: str) -> None:
    engine = create_engine(any_ledger_url)
    _posts(engine, [f"p{n}" for n in range(100)])
    table = PostRecord.__table__  # type: ignore[attr-defined]
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    with engine.connect() as connection:
        for count in (1, 7, 100):
            ids = [f"p{n}" for n in range(count)]
            query = select(table.c.post_id).where(any_of(connection, table.c.post_id, ids))
            assert len(connection.execute(query).all()) == count
    engine.dispose()
    assert len(statements) == 3 and len(set(statements)) == 1, statements
    assert statements[0].count("?") + statements[0].count("%(") <= 2  # one parameter, not 100
