"""A post's own input fields (author, source, …) in the ledger: read from the file, kept at the
sync, written again only when they changed, and never a reason to redo the work — they are not
part of the fingerprint. A sync of an unchanged month still writes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import text

from postledger.batches.posts import Post, load_posts
from postledger.ledger import Ledger
from postledger.record.models import PostStatus
from tests.support.ledgers import WRITES, asked, settle_next_batch, statements
from tests.support.months import write_jsonl

MONTH = "2026-10"


@contextmanager
def writes(ledger: Ledger) -> Iterator[list[tuple[str, Any]]]:
    """The writing statements the ledger sends while the block runs, with their parameters
    (filled in when the block ends)."""
    with statements(ledger) as seen:
        written: list[tuple[str, Any]] = []
        yield written
    written.extend((sql, parameters) for sql, parameters in seen if WRITES.match(sql))


def fields(**values: object) -> str:
    return json.dumps(values, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def month(**changed: str) -> list[Post]:
    """Four posts, their own fields as given in `changed` (by id) or by default."""
    return [
        Post(f"p{i}", f"post {i}: the app logs me out", i + 1, changed.get(f"p{i}", default))
        for i, default in enumerate(
            [fields(author="ana", lang="en"), fields(author="bo"), "", fields(source="forum")]
        )
    ]


def complete_first_batch(ledger: Ledger) -> list[str]:
    """One batch of two posts sent and its output applied: its posts `completed`."""
    ledger.plan(MONTH, max_posts=2, max_chars=10_000)
    sent = settle_next_batch(ledger, MONTH, {"input_tokens": 10, "output_tokens": 20})
    return [p.post_id for p in sent]


def stored(ledger: Ledger) -> dict[str, str | None]:
    return {p.post_id: p.fields for p in ledger.posts(MONTH)}


def test_the_file_gives_each_post_its_own_fields(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / f"{MONTH}.jsonl",
        [
            '{"id": "a", "text": "hi", "source": "forum", "author": "Zoë", "tags": ["x"]}',
            '{"id": "b", "text": "hello"}',
            '{"lang": "fr", "text": "salut", "id": 7}',
        ],
    )
    posts = load_posts(path)
    assert [p.fields for p in posts] == [
        '{"author":"Zoë","source":"forum","tags":["x"]}',
        "",
        '{"lang":"fr"}',
    ]


def test_changed_fields_alone_are_written_and_the_work_is_kept(any_ledger_url: str) -> None:
    ledger = Ledger(any_ledger_url)
    ledger.sync_posts(MONTH, month(), model="m", analysis=asked())
    assert stored(ledger) == {
        "p0": fields(author="ana", lang="en"),
        "p1": fields(author="bo"),
        "p2": None,  # no field of its own
        "p3": fields(source="forum"),
    }
    done = complete_first_batch(ledger)
    assert done == ["p0", "p1"]
    before = {p.post_id: p for p in ledger.posts(MONTH)}
    events = len(ledger.events(MONTH))

    # An author renamed, a field added, one removed: the fields only are written, in one
    # statement; nothing else moves.
    edited = month(p0=fields(author="ana b.", lang="en"), p2=fields(lang="de"), p3="")
    with writes(ledger) as seen:
        again = ledger.sync_posts(MONTH, edited, model="m", analysis=asked())
    assert (again.new, again.unchanged, again.changed) == (0, 4, 0)
    assert len(seen) == 1 and seen[0][0].lstrip().upper().startswith("UPDATE POSTS")
    assert len(seen[0][1]) == 3  # rows of one executemany: p0, p2, p3 (checked below)
    assert stored(ledger) == {
        "p0": fields(author="ana b.", lang="en"),
        "p1": fields(author="bo"),
        "p2": fields(lang="de"),
        "p3": None,
    }
    after = {p.post_id: p for p in ledger.posts(MONTH)}
    for post_id, post in after.items():  # the work, the history: as they were
        old = before[post_id]
        assert (post.status, post.result, post.attempts, post.batch_id, post.fingerprint) == (
            old.status,
            old.result,
            old.attempts,
            old.batch_id,
            old.fingerprint,
        )
    assert after["p0"].status is PostStatus.COMPLETED and after["p0"].result
    assert len(ledger.events(MONTH)) == events  # no status changed

    # The same file again: nothing at all is written.
    with writes(ledger) as seen:
        same = ledger.sync_posts(MONTH, edited, model="m", analysis=asked())
    assert (same.new, same.unchanged, same.changed) == (0, 4, 0)
    assert seen == []

    # A changed text starts over, with the fields the file gives now.
    retold = [*edited[:1], Post("p1", "a new text", 2, fields(author="bo", lang="en")), *edited[2:]]
    assert ledger.sync_posts(MONTH, retold, model="m", analysis=asked()).changed == 1
    p1 = next(p for p in ledger.posts(MONTH) if p.post_id == "p1")
    assert p1.status is PostStatus.PENDING and p1.result is None
    assert p1.fields == fields(author="bo", lang="en")
    ledger.close()


def test_posts_synced_before_their_fields_were_kept_learn_them(any_ledger_url: str) -> None:
    """A ledger from before the fields were kept (the column empty): the next sync writes the
    fields of the posts that have some, and only theirs; the work stays."""
    ledger = Ledger(any_ledger_url)
    ledger.sync_posts(MONTH, month(), model="m", analysis=asked())
    complete_first_batch(ledger)
    with ledger.engine.begin() as connection:
        connection.execute(text("UPDATE posts SET fields = NULL"))
    events = len(ledger.events(MONTH))

    with writes(ledger) as seen:
        again = ledger.sync_posts(MONTH, month(), model="m", analysis=asked())
    assert (again.new, again.unchanged, again.changed) == (0, 4, 0)
    assert len(seen) == 1
    assert len(seen[0][1]) == 3  # rows of one executemany: p0, p1, p3 (p2 has no field)
    assert stored(ledger) == {p.id: p.fields or None for p in month()}
    assert [p.status for p in ledger.posts(MONTH)][:2] == [PostStatus.COMPLETED] * 2
    assert len(ledger.events(MONTH)) == events
    ledger.close()


def test_a_broken_emoji_in_a_field_is_kept_and_reported(
    tmp_path: Path, any_ledger_url: str
) -> None:
    """A lone surrogate (half an emoji, as `\\ud83d` in the file) is valid JSON and a valid
    input; no file of the report can hold it: it is written as the escape's text."""
    from postledger.progress.report import write_report
    from postledger.progress.status import status_of

    path = write_jsonl(
        tmp_path / f"{MONTH}.jsonl",
        ['{"id": "p0", "text": "logged out again", "author": "ana\\ud83d", "lang": "en"}'],
    )
    ledger = Ledger(any_ledger_url)
    ledger.sync_posts(MONTH, load_posts(path), model="m", analysis=asked())
    report = status_of(ledger, MONTH)
    assert report is not None
    out = tmp_path / "report"
    with ledger.plain() as reader:
        write_report(reader, MONTH, report, out)
    (row,) = [json.loads(line) for line in (out / f"posts-{MONTH}.jsonl").read_text().splitlines()]
    assert (row["author"], row["lang"]) == ("ana\\ud83d", "en")
    assert "ana\\ud83d" in (out / f"posts-{MONTH}.csv").read_text(encoding="utf-8")
    assert sorted(p.name for p in out.iterdir()) == [
        f"posts-{MONTH}.csv",
        f"posts-{MONTH}.jsonl",
        f"summary-{MONTH}.md",
    ]  # nothing half-written left beside them
    ledger.close()
