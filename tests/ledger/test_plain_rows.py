"""`postledger breaker` and `postledger plan` read their rows in plain SQL
(`postledger.record.rows`) without the ORM: what they show must be what the tables hold, on
SQLite and PostgreSQL, opened read-only by the driver or through a running process's engine,
and the commands (and `report`) must not import SQLAlchemy at all (that import alone takes
longer than their answer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlmodel import Session, select

from postledger.batches.posts import Post
from postledger.defaults import Price, sqlite_file
from postledger.guards.breaker import Signal
from postledger.ledger import Ledger
from postledger.progress.status import breaker_report
from postledger.record import rows
from postledger.record.models import ApprovalRecord, BatchStatus, BreakerLevel, BreakerRecord
from postledger.record.plain import read_only
from postledger.recovery.steps import RecoveryAction, plan_recovery
from tests.support.ledgers import asked, billed, priced
from tests.support.repo import REPO

MONTH = "2026-10"
PRICE = Price(input=150_000, output=600_000)


def _an_interrupted_month(url: str) -> Ledger:
    """Four batches of two posts: one sent with no task id (one of its posts changed since),
    one with its task id saved, one with its output saved, one still queued; a breaker tripped
    open by two failures of the month; and a question that waits."""
    ledger = Ledger(url)
    posts = [Post(f"p{i}", f"post {i}", i + 1) for i in range(8)]
    ledger.sync_posts(MONTH, posts, model="m", analysis=asked())
    sent, polled, saved, _ = ledger.plan(MONTH, max_posts=2, max_chars=1000).batches
    for batch in (sent, polled, saved):
        ledger.mark_running(batch.batch_id, pricing=priced(PRICE))
    ledger.record_task_id(polled.batch_id, "task_42")
    ledger.save_output(saved.batch_id, "[]", {"input_tokens": 1, "output_tokens": 1}, billed(PRICE))
    changed = [*posts[:1], Post("p1", "post 1, edited", 2), *posts[2:]]
    ledger.sync_posts(MONTH, changed, model="m", analysis=asked())
    for _ in range(2):
        ledger.approvals.signal("up", Signal.TRANSPORT_FAILURE, "503 after retries", month=MONTH)
    ledger.approvals.ask(MONTH, "up", "continue?", flow_run_id="run-1", prefect_api_url=None)
    return ledger


def test_the_rows_are_what_the_tables_hold(any_ledger_url: str) -> None:
    ledger = _an_interrupted_month(any_ledger_url)
    with Session(ledger.engine) as session:
        stored = session.exec(select(BreakerRecord)).one()
        (asked,) = session.exec(select(ApprovalRecord)).all()
    orm_batches = ledger.batches(MONTH, BatchStatus.RUNNING, BatchStatus.RECEIVED)
    history = ledger.approvals.history("up")
    with read_only(any_ledger_url) as reader, ledger.plain() as through_engine:
        assert reader is not None
        for look in (reader, through_engine):
            (breaker,) = rows.breakers(look)
            assert (breaker.upstream, breaker.level, breaker.failures) == (
                "up",
                BreakerLevel.OPEN,
                2,
            )
            assert (breaker.reason, breaker.changed_at) == (stored.reason, stored.changed_at)
            moves = rows.breaker_history(look, "up")
            assert [(m.at, m.month, m.from_level, m.to_level, m.why) for m in moves] == [
                (e.at, e.month, e.from_level, e.to_level, e.why) for e in history
            ]
            assert [m.to_level for m in moves] == [BreakerLevel.PROBE, BreakerLevel.OPEN]
            assert rows.breaker_history(look, "up", limit=1) == moves[-1:]
            (question,) = rows.open_questions(look)
            assert (question.month, question.upstream, question.flow_run_id) == (
                MONTH,
                "up",
                "run-1",
            )
            assert question.asked_at == asked.asked_at
            assert rows.knows_month(look, MONTH) and not rows.knows_month(look, "2026-11")

            batches = rows.interrupted(look, MONTH)
            assert [b.batch_id for b in batches] == [b.batch_id for b in orm_batches]
            for row, record in zip(batches, orm_batches, strict=True):
                assert (row.seq, row.status, row.request, row.raw_output) == (
                    record.seq,
                    record.status,
                    record.request,  # JSON decoded on both databases
                    record.raw_output,
                )
                assert (row.upstream_task_id, row.sends) == (record.upstream_task_id, record.sends)
                assert row.post_ids == [p.post_id for p in ledger.posts_of(record.batch_id)]
            assert [b.post_ids for b in batches] == [["p0"], ["p2", "p3"], ["p4", "p5"]]

    plan = plan_recovery(batches, idempotent=False, price=PRICE, prompt="p")
    assert [s.action for s in plan.steps] == [
        RecoveryAction.RESUBMIT,
        RecoveryAction.POLL,
        RecoveryAction.FINISH_LOCALLY,
    ]
    ledger.close()


def test_the_breaker_report_names_the_month_that_waits(any_ledger_url: str) -> None:
    ledger = _an_interrupted_month(any_ledger_url)
    with read_only(any_ledger_url) as reader:
        report = breaker_report(reader, "simulator")
    ledger.close()
    by_name = {b["upstream"]: b for b in report["breakers"]}
    assert by_name["simulator"]["level"] == "normal" and by_name["simulator"]["since"] is None
    assert by_name["up"]["level"] == "open" and f"--month {MONTH}" in by_name["up"]["what_to_do"]
    assert [q["month"] for q in report["waiting_for_a_person"]] == [MONTH]
    assert breaker_report(None, "simulator")["breakers"][0]["what_to_do"] == "nothing to do"


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///relative.db",
        "sqlite:////tmp/abs%20path.db",
        "sqlite+pysqlite:///x.db?timeout=5",
        "sqlite://",
        "sqlite:///:memory:",
        "postgresql+psycopg://u@h/db",
    ],
)
def test_a_sqlite_file_is_found_as_sqlalchemy_finds_it(url: str) -> None:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    expected = parsed.database if parsed.get_backend_name() == "sqlite" else None
    assert sqlite_file(url) == (None if expected in (None, "", ":memory:") else expected)


@pytest.mark.parametrize(
    "command",
    [["status", "--month", MONTH], ["breaker"], ["plan", "--month", MONTH], ["report"]],
)
def test_the_read_commands_import_no_orm(
    any_ledger_url: str, command: list[str], tmp_path: Path
) -> None:
    _an_interrupted_month(any_ledger_url).close()
    if command == ["report"]:
        command = ["report", "--month", MONTH, "--out", str(tmp_path / "report")]
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('ORM' if {'sqlalchemy', 'sqlmodel'} & set(sys.modules)"
        " else 'no ORM', file=sys.stderr))\n"
        # Nor the settings model (pydantic-settings, ~0.2 s): what a read needs of the
        # configuration is in postledger.defaults.
        "atexit.register(lambda: print('settings' if 'pydantic_settings' in sys.modules"
        " else 'no settings', file=sys.stderr))\n"
        "from cli.app import main\n"
        f"sys.argv = ['postledger', *{command!r}]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(REPO), "POSTLEDGER_DATABASE_URL": any_ledger_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    said = done.stderr.strip().splitlines()
    assert said[-1] == "no ORM"
    if command[0] in ("status", "report"):  # breaker and plan read the upstream's name in it
        assert said[-2] == "no settings"
    assert MONTH in done.stdout or "up" in done.stdout
    if command[0] == "report":  # what it read it wrote: every post, in file order
        lines = (tmp_path / "report" / f"posts-{MONTH}.jsonl").read_text().splitlines()
        assert [json.loads(line)["id"] for line in lines] == [f"p{i}" for i in range(8)]
