"""Bulk writes on PostgreSQL go through COPY in its text format (`record/copy_text.py`): every
value must arrive as an INSERT would have stored it, whatever its text holds (tabs, newlines,
backslashes, a literal \\N, any script)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, select

from postledger.ledger import Ledger
from postledger.record.copy_text import NULL, copy_field, copy_lines
from postledger.record.db import insert_many
from postledger.record.models import PostRecord, PostStatus


def test_each_kind_of_value_is_spelled_as_copy_reads_it() -> None:
    assert copy_field(None) == NULL == "\\N"
    assert copy_field("\\N") == "\\\\N"  # a text that reads like NULL is not NULL
    assert copy_field("a\tb\nc\rd\\e") == "a\\tb\\nc\\rd\\\\e"
    assert copy_field(True) == "t" and copy_field(False) == "f"
    assert copy_field(42) == "42"
    assert copy_field(PostStatus.PENDING) == PostStatus.PENDING.value
    at = datetime(2026, 10, 2, 10, 0, tzinfo=timezone(timedelta(hours=2)))
    assert copy_field(at) == "2026-10-02T10:00:00+02:00"
    assert copy_lines([["a", None], [1, True]]) == "a\t1\n\\N\tt\n"
    # A column is spelled whole when it can be: plain strings, integers; else value by value.
    assert copy_lines([["a", "b"], [1, 22]]) == "a\t1\nb\t22\n"
    assert copy_lines([["a", "b\tc"], [1, False]]) == "a\t1\nb\\tc\tf\n"
    assert copy_lines([["a", PostStatus.PENDING]]) == f"a\n{PostStatus.PENDING.value}\n"


def test_what_copy_cannot_say_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        copy_field(datetime(2026, 10, 2))
    with pytest.raises(TypeError, match="no COPY text"):
        copy_field(1.5)


# Any text PostgreSQL can store: no NUL, no lone surrogate.
texts = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)
specials = st.sampled_from(["", "\\N", "\\.", "\\", "\t", "\n", "\r\n", "a\\tb", "é\u2028"])
values = st.one_of(texts, specials)


@pytest.fixture(scope="module")
def pg_url(pg_server: str) -> Any:
    from tests.support.databases import fresh_database

    with fresh_database("postledger_test", pg_server) as url:
        Ledger(url).close()  # the schema
        yield url


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    rows=st.lists(st.tuples(values, values, st.one_of(st.none(), values)), min_size=1, max_size=8)
)
def test_rows_copied_into_postgresql_read_back_as_they_were(
    pg_url: str, rows: list[tuple[str, str, str | None]]
) -> None:
    now = datetime.now(UTC)
    written = [
        {
            "month": "2026-10",
            "post_id": f"{n}{post_id}",
            "position": n,
            "text": text,
            "fields": fields,
            "fingerprint": "f" * 64,
            "inputs": {"text": text, "n": n},
            "status": PostStatus.PENDING,
            "attempts": 0,
            "extra_attempts": 0,
            "requeues": 0,
            "split": n % 2 == 0,
            "batch_id": None,
            "result": None,
            "created_at": now,
            "updated_at": now,
        }
        for n, (post_id, text, fields) in enumerate(rows)
    ]
    engine = create_engine(pg_url)
    table = PostRecord.__table__  # type: ignore[attr-defined]
    try:
        with engine.connect() as connection, connection.begin() as transaction:
            insert_many(connection, table, written)
            read = connection.execute(select(table).order_by(table.c.position)).mappings().all()
            transaction.rollback()
    finally:
        engine.dispose()
    assert [{key: row[key] for key in written[0]} for row in read] == written
