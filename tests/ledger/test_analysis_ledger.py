"""The analyses a month's posts were asked, kept in the ledger (`record/analyses.py`): each
once, by version, on both ledgers; the report's columns read from them, not from the settings
of the day."""

from __future__ import annotations

import json

from postledger.analysis import fields_version, load_analysis
from postledger.batches.posts import Post
from postledger.ledger import open_ledger
from postledger.progress.answers import answer_fields
from postledger.record import rows
from postledger.record.plain import read_only
from tests.support.ledgers import WRITES, statements
from tests.support.repo import REPO

TRIAGE = load_analysis(str(REPO / "examples" / "support_triage.json"))
POSTS = [Post("p1", "I was charged twice.", 1), Post("p2", "Love it.", 2)]


def test_each_analysis_is_kept_once_and_read_back_the_same(any_ledger_url: str) -> None:
    ledger = open_ledger(any_ledger_url)
    ledger.sync_posts("2026-10", POSTS, model="m", analysis=TRIAGE)
    ledger.sync_posts("2026-11", POSTS, model="m", analysis=TRIAGE)  # another month, the same
    ledger.sync_posts("2026-12", POSTS, model="m", analysis=load_analysis(None))
    with read_only(any_ledger_url) as reader:
        assert reader is not None
        kept = rows.analyses(reader)
        assert set(kept) == {fields_version(TRIAGE), "1"}
        assert load_analysis(kept[fields_version(TRIAGE)]) == TRIAGE
        # The report's columns: each month by the analysis its posts were asked.
        for month, analysis in (("2026-10", TRIAGE), ("2026-12", load_analysis(None))):
            fields = answer_fields(reader, rows.reported_posts(reader, month))
            assert tuple(fields.values()) == analysis.fields
    ledger.close()


def test_a_sync_of_an_unchanged_month_keeps_writing_nothing(any_ledger_url: str) -> None:
    ledger = open_ledger(any_ledger_url)
    ledger.sync_posts("2026-10", POSTS, model="m", analysis=TRIAGE)
    with statements(ledger) as seen:
        report = ledger.sync_posts("2026-10", POSTS, model="m", analysis=TRIAGE)
    assert report.unchanged == 2
    assert [sql for sql, _ in seen if WRITES.match(sql)] == []
    ledger.close()


def test_a_changed_analysis_starts_the_posts_over(any_ledger_url: str) -> None:
    ledger = open_ledger(any_ledger_url)
    ledger.sync_posts("2026-10", POSTS, model="m", analysis=load_analysis(None))
    report = ledger.sync_posts(
        "2026-10", POSTS, model="m", analysis=load_analysis(None, instructions="Other words.")
    )
    assert report.changed == 2
    assert json.dumps(ledger.posts("2026-10")[0].inputs)  # the new parts are kept
    report = ledger.sync_posts("2026-10", POSTS, model="m", analysis=TRIAGE)
    assert report.changed == 2
    ledger.close()
