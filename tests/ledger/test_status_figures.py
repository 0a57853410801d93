"""`status` reads a month in plain SQL (`postledger.record.figures`), without the ORM: its figures
must be what the ledger's rows say, on SQLite and PostgreSQL, whether the ledger is opened
read-only by the driver (`postledger status`) or through a running process's engine."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from postledger.batches.output import check_output
from postledger.batches.posts import Post
from postledger.defaults import Price
from postledger.failures.hints import CONTINUE_HINTS
from postledger.failures.policy import after_output
from postledger.guards.charges import spend_summary
from postledger.ledger import Ledger
from postledger.progress.status import status, status_of
from postledger.record import figures
from postledger.record.migrate import SchemaMismatch
from postledger.record.models import Answer, BatchStatus, PostStatus, Question
from postledger.record.plain import LedgerUnreadable, read_only
from postledger.settings import Limits
from tests.support.ledgers import asked, billed, priced

MONTH = "2026-10"
PRICE = Price(input=150_000, output=600_000)


def _item(post_id: str, category: str = "praise") -> str:
    return (
        f'{{"id": "{post_id}", "category": "{category}", "sentiment": "neutral", "summary": "s"}}'
    )


def _finish(ledger: Ledger, batch_id: str, raw: str, attempts: int = 1) -> None:
    ledger.save_output(batch_id, raw, {"input_tokens": 10, "output_tokens": 5}, billed(PRICE))
    check = check_output(raw, ledger.batch(batch_id).post_ids, asked())
    decision = after_output(
        ledger.batch(batch_id), ledger.posts_of(batch_id), check, Limits(max_attempts=attempts)
    )
    ledger.apply(batch_id, decision, check)


def _a_month_with_everything(url: str) -> Ledger:
    """Completed posts; failures of two kinds, as many of each, the later kind first in file
    order (too long: p00 and p11; no paid attempt left: p01 invalid, p05 missing twice); a running
    batch; and four questions: one answered continue, one stop, two still open."""
    ledger = Ledger(url)
    texts = {0: "x" * 200, 11: "y" * 200}
    month = [Post(f"p{i:02d}", texts.get(i, f"post {i}"), i + 1) for i in range(12)]
    ledger.sync_posts(MONTH, month, model="m", analysis=asked())
    first, second, third = ledger.plan(MONTH, max_posts=4, max_chars=100).batches
    ledger.mark_running(first.batch_id, pricing=priced(PRICE))
    items = [_item("p01", "nonsense"), _item("p02"), _item("p03"), _item("p04")]
    _finish(ledger, first.batch_id, "[" + ", ".join(items) + "]")
    ledger.mark_running(second.batch_id, pricing=priced(PRICE))
    items = [_item(f"p0{i}") for i in (6, 7, 8)]
    _finish(ledger, second.batch_id, "[" + ", ".join(items) + "]", attempts=2)
    (again,) = ledger.plan(MONTH, max_posts=4, max_chars=100).batches  # p05, a paid retry
    ledger.mark_running(again.batch_id, pricing=priced(PRICE))
    _finish(ledger, again.batch_id, "[]", attempts=2)
    ledger.mark_running(third.batch_id, pricing=priced(PRICE))  # still in flight
    for answer in (Answer.CONTINUE, Answer.STOP, None):
        ledger.approvals.ask(MONTH, "up", "go on?", flow_run_id=None, prefect_api_url=None)
        if answer is not None:
            ledger.approvals.answer(MONTH, "up", answer, note="", by="test")
    ledger.approvals.ask(
        MONTH, "up", "resubmit?", flow_run_id=None, prefect_api_url=None, kind=Question.RECOVERY
    )
    return ledger


def _failures_from_rows(ledger: Ledger) -> list[dict[str, Any]]:
    failed = ledger.posts(MONTH, PostStatus.FAILED)
    first_reason = {p.failure_kind: p.failure_reason for p in reversed(failed)}
    return [
        {
            "kind": kind.value if kind else None,
            "count": n,
            "sample_reason": first_reason[kind],
            "how_to_continue": CONTINUE_HINTS.get(kind) if kind else None,
        }
        for kind, n in Counter(p.failure_kind for p in failed).most_common()
    ]


def test_status_says_what_the_rows_say(any_ledger_url: str) -> None:
    ledger = _a_month_with_everything(any_ledger_url)
    with read_only(any_ledger_url) as reader:
        assert reader is not None
        report = status(reader, MONTH)
        failed = figures.failed_posts(reader, MONTH)
    assert report == status_of(ledger, MONTH)  # the driver's own connection, and the engine's
    assert report is not None

    rows = ledger.posts(MONTH)
    by_status = Counter(p.status.value for p in rows)
    assert report["counts"] == {s.value: by_status[s.value] for s in PostStatus}
    assert report["failures"] == _failures_from_rows(ledger)
    assert [(f["kind"], f["count"]) for f in report["failures"]] == [
        ("too_long", 2),
        ("attempts_exhausted", 2),
    ]
    assert "category" in report["failures"][1]["sample_reason"]  # p01's, the first
    assert [(p.post_id, p.kind) for p in failed] == [
        (p.post_id, p.failure_kind) for p in rows if p.status is PostStatus.FAILED
    ]
    assert report["retries"]["business"] == sum(max(p.attempts - 1, 0) for p in rows) == 1
    assert report["retries"]["requeues"] == sum(p.requeues for p in rows)
    batches = ledger.batches(MONTH)
    assert report["batches"] == {s.value: sum(b.status is s for b in batches) for s in BatchStatus}
    assert report["running_batches"] == [b.batch_id for b in batches if b.status.value == "running"]
    assert report["spend"].items() >= spend_summary(ledger.spend(MONTH)).items()
    assert report["spend"]["confirmed"] > 0 and report["spend"]["possible"] > 0
    assert report["approvals"] == {"asked": 4, "given": 1, "refused": 1, "unanswered": 2}
    waiting = ledger.approvals.waiting(MONTH)
    assert waiting is not None and report["waiting_for"]["question"] == waiting.kind.value
    assert report["waiting_for"]["asked_at"] == waiting.asked_at.isoformat()
    ledger.close()


def test_a_read_only_look_writes_nothing(any_ledger_url: str) -> None:
    _a_month_with_everything(any_ledger_url).close()
    with pytest.raises(LedgerUnreadable), read_only(any_ledger_url) as reader:
        assert reader is not None
        reader.rows("DELETE FROM posts")
    with read_only(any_ledger_url) as reader:
        assert reader is not None and figures.post_counts(reader, MONTH)[PostStatus.COMPLETED] > 0


def test_no_ledger_yet_is_nothing_to_read_and_nothing_is_made(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'none' / 'ledger.db'}"
    with read_only(url) as reader:
        assert reader is None
    assert not (tmp_path / "none").exists()


def test_a_ledger_of_another_schema_is_said_so(any_ledger_url: str) -> None:
    ledger = Ledger(any_ledger_url)
    with ledger.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '0005'")
    ledger.close()
    with pytest.raises(SchemaMismatch, match="postledger setup"), read_only(any_ledger_url):
        pass


def test_a_database_that_does_not_answer_is_said_so() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:9/none?connect_timeout=2"
    with pytest.raises(LedgerUnreadable, match="POSTLEDGER_DATABASE_URL"), read_only(url):
        pass


def test_a_ledger_from_before_migrations_is_said_so(any_ledger_url: str) -> None:
    ledger = Ledger(any_ledger_url)
    with ledger.engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE alembic_version")
    ledger.close()
    with (
        pytest.raises(SchemaMismatch, match="from before migrations"),
        read_only(any_ledger_url),
    ):
        pass


def test_urls_are_read_as_sqlalchemy_reads_them(any_ledger_url: str, tmp_path: Path) -> None:
    """A password with a bare `%` (PostgreSQL here trusts any password), a percent-encoded
    SQLite path: the same ledger the ORM opens, never an error that shows the password."""
    if any_ledger_url.startswith("sqlite"):
        folder = tmp_path / "a folder"
        folder.mkdir()
        url = f"sqlite:///{folder / 'ledger.db'}"
        written, read = url, url.replace("a folder", "a%20folder")
    else:
        written = any_ledger_url
        read = any_ledger_url.replace("postgres@", "postgres:p%zzword@", 1)
    _a_month_with_everything(written).close()
    with read_only(read) as reader:
        assert reader is not None and figures.post_counts(reader, MONTH)[PostStatus.FAILED] == 4
