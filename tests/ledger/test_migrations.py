"""The ledger's schema comes from Alembic revisions, on SQLite and PostgreSQL alike: a new
ledger is made by them, an older one is upgraded in place with every record kept, and the
revisions always agree with the models."""

from __future__ import annotations

import threading

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text
from sqlmodel import Session, SQLModel

from postledger.batches.posts import Post
from postledger.ledger import Ledger
from postledger.record.migrate import SchemaMismatch, alembic_config, head_revision
from postledger.record.models import BatchRecord, PostStatus
from tests.support.ledgers import asked, ledger_at_baseline


def test_a_new_ledger_is_made_by_the_revisions_and_matches_the_models(
    any_ledger_url: str,
) -> None:
    ledger = Ledger(any_ledger_url)
    assert ledger.schema_revision() == head_revision()
    with ledger.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    ledger.close()
    assert differences == [], f"models.py and the revisions disagree: {differences}"


def test_an_older_ledger_is_upgraded_in_place_keeping_its_records(any_ledger_url: str) -> None:
    ledger_at_baseline(any_ledger_url)
    ledger = Ledger(any_ledger_url)  # opening for writing upgrades
    assert ledger.schema_revision() == head_revision()
    (post,) = ledger.posts("2026-10")
    assert (post.post_id, post.status.value, post.result) == (
        "p1",
        "completed",
        {"category": "praise"},
    )
    # The new tables work: the month can be synced and its breaker read.
    ledger.sync_posts("2026-10", [Post("p2", "new post", 1)], model="m", analysis=asked())
    assert len(ledger.posts("2026-10")) == 2
    ledger.close()


def test_a_ledger_made_before_migrations_is_recognised_and_upgraded(
    any_ledger_url: str,
) -> None:
    ledger_at_baseline(any_ledger_url)
    engine = create_engine(any_ledger_url)
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE alembic_version"))
    engine.dispose()
    ledger = Ledger(any_ledger_url)
    assert ledger.schema_revision() == head_revision()
    assert [p.post_id for p in ledger.posts("2026-10")] == ["p1"]
    ledger.close()


def test_reading_an_older_ledger_says_to_run_setup_and_changes_nothing(
    any_ledger_url: str,
) -> None:
    ledger_at_baseline(any_ledger_url)
    with pytest.raises(SchemaMismatch, match="postledger setup"):
        Ledger(any_ledger_url, read_only=True)
    engine = create_engine(any_ledger_url)
    with engine.connect() as connection:
        assert MigrationContext.configure(connection).get_current_revision() == "0001"
    engine.dispose()


def test_workers_opening_a_new_ledger_at_once_migrate_it_once(any_ledger_url: str) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def open_it() -> None:
        try:
            start.wait()
            Ledger(any_ledger_url).close()  # each with its own engine, like separate workers
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    ledger = Ledger(any_ledger_url)
    assert ledger.schema_revision() == head_revision()
    ledger.close()


def test_a_ledger_from_between_releases_gets_only_what_it_lacks(any_ledger_url: str) -> None:
    """Made while issues 4–6 were being written: breakers and approvals, no spend, no
    month_runs, no alembic_version."""
    Ledger(any_ledger_url).close()
    engine = create_engine(any_ledger_url)
    with engine.begin() as connection:
        for table in ("alembic_version", "month_runs", "spend"):
            connection.execute(text(f'DROP TABLE "{table}"'))
    engine.dispose()
    ledger = Ledger(any_ledger_url)
    assert ledger.schema_revision() == head_revision()
    with ledger.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    assert differences == []
    ledger.close()


def test_the_head_postledger_knows_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    assert head_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_an_older_ledgers_events_are_kept_in_order_under_their_new_key(
    any_ledger_url: str,
) -> None:
    from postledger.record.db import make_engine
    from postledger.record.migrate import upgrade

    engine = make_engine(any_ledger_url)
    upgrade(engine, "0008")  # events with a surrogate id, their (month, seq) unique
    with engine.begin() as connection:
        for seq, (post_id, status) in enumerate([("p1", "pending"), ("p1", "queued")], 1):
            connection.execute(
                text(
                    "INSERT INTO events (month, seq, entity, entity_id, to_status, why, at) "
                    "VALUES ('2026-10', :seq, 'POST', :id, :status, 'then', :at)"
                ),
                {"seq": seq, "id": post_id, "status": status, "at": "2026-10-02 10:00:00+00"},
            )
    engine.dispose()
    ledger = Ledger(any_ledger_url)  # upgrades to the head
    ledger.sync_posts("2026-10", [Post("p2", "new post", 1)], model="m", analysis=asked())
    events = [(e.seq, e.entity_id, e.to_status) for e in ledger.events("2026-10")]
    assert events == [(1, "p1", "pending"), (2, "p1", "queued"), (3, "p2", "pending")]
    with ledger.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    assert differences == []
    ledger.close()


def test_the_index_by_batch_was_made_partial_and_is_dropped_at_the_head(
    any_ledger_url: str,
) -> None:
    """0010 kept only posts in a batch in the index by batch; 0011 drops it (a batch's posts are
    found by key among its own ids)."""
    from sqlalchemy import inspect

    from postledger.record.db import make_engine
    from postledger.record.migrate import upgrade

    def batch_index_condition() -> str | None:
        with engine.connect() as connection:
            found = [
                i
                for i in inspect(connection).get_indexes("posts")
                if i["name"] == "ix_posts_batch_status_position"
            ]
        if not found:
            return "gone"
        options = found[0].get("dialect_options", {})
        where = options.get("sqlite_where", options.get("postgresql_where"))
        return "whole" if where is None else str(where).strip("()")

    engine = make_engine(any_ledger_url)
    upgrade(engine, "0009")  # every post in the index, in a batch or not
    assert batch_index_condition() == "whole"
    upgrade(engine, "0010")
    assert batch_index_condition() == "batch_id IS NOT NULL"
    Ledger(any_ledger_url).close()  # upgrades to the head
    assert batch_index_condition() == "gone"
    engine.dispose()


def test_a_ledger_gets_its_post_counts_from_its_posts(any_ledger_url: str) -> None:
    """0012 keeps a month's post counts as rows: an older ledger's are counted from its posts,
    every month and state, and the state machine keeps them from there."""
    from tests.support.ledgers import settle_next_batch

    ledger = Ledger(any_ledger_url)
    for month, n in (("2026-09", 3), ("2026-10", 30)):
        posts = [Post(f"p{i}", f"post {i}", i + 1) for i in range(n)]
        ledger.sync_posts(month, posts, model="m", analysis=asked())
    ledger.plan("2026-10", max_posts=25, max_chars=10_000)
    settle_next_batch(ledger, "2026-10")
    ledger.close()
    engine = create_engine(any_ledger_url)
    with engine.begin() as connection:  # the ledger as 0011 left it
        connection.execute(text("DROP INDEX ix_posts_retried"))
        connection.execute(text("DROP TABLE post_counts"))
        connection.execute(text("UPDATE alembic_version SET version_num = '0011'"))
    engine.dispose()

    ledger = Ledger(any_ledger_url)
    assert ledger.schema_revision() == head_revision()
    assert {
        m: {s: n for s, n in ledger.counts(m).items() if n} for m in ("2026-09", "2026-10")
    } == {
        "2026-09": {PostStatus.PENDING: 3},
        "2026-10": {PostStatus.COMPLETED: 25, PostStatus.QUEUED: 5},
    }
    settle_next_batch(ledger, "2026-10")
    assert ledger.counts("2026-10")[PostStatus.COMPLETED] == 30
    ledger.close()


def test_on_postgresql_long_values_are_compressed_with_lz4(pg_ledger_url: str) -> None:
    """0019: a kept request (~9 kB for 25 posts) is stored LZ4-compressed where the server
    has LZ4; back to pglz when the revision is undone. Values are read back alike."""
    from alembic import command

    from postledger.record.db import make_engine

    engine = make_engine(pg_ledger_url)
    with engine.connect() as connection:
        has_lz4 = connection.execute(
            text(
                "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                "WHERE name = 'default_toast_compression'"
            )
        ).scalar()
    if not has_lz4:
        pytest.skip("this PostgreSQL has no LZ4: the revision changes nothing")
    Ledger(pg_ledger_url).close()
    long = [[f"p{i}", f"post {i} " + "words of a post, " * 40] for i in range(25)]

    def stored_with(batch_id: str) -> str:
        with Session(engine) as session:
            session.add(
                BatchRecord(
                    batch_id=batch_id,
                    month="2026-10",
                    seq=int(batch_id[1:]),
                    post_ids=[],
                    request=long,
                    idempotency_key=batch_id,
                )
            )
            session.commit()
        with engine.connect() as connection:
            method, request = connection.execute(
                text(
                    "SELECT pg_column_compression(request), request FROM batches "
                    "WHERE batch_id = :b"
                ),
                {"b": batch_id},
            ).one()
        assert request == long
        return str(method)

    assert stored_with("b1") == "lz4"
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0018")
    assert stored_with("b2") == "pglz"
    engine.dispose()
