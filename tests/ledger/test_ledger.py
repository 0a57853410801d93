"""The ledger on a real SQLite file and a real PostgreSQL database."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from postledger.batches.output import check_output
from postledger.batches.posts import Post
from postledger.failures.policy import after_output
from postledger.ledger import Ledger
from postledger.record.models import BatchStatus, FailureKind, PostStatus
from postledger.record.states import IllegalTransition
from postledger.settings import Limits
from simulator.model import write_output
from tests.support.ledgers import asked, started

MONTH = "2026-10"


def posts(n: int, size: int = 10, prefix: str = "p") -> list[Post]:
    return [Post(f"{prefix}{i:03d}", f"post {i} " + "x" * size, i + 1) for i in range(n)]


def test_sync_new_unchanged_changed(any_ledger_url: str) -> None:
    ledger = Ledger(any_ledger_url)
    first = ledger.sync_posts(MONTH, posts(3), model="m", analysis=asked())
    assert (first.new, first.unchanged, first.changed) == (3, 0, 0)
    ledger.plan(MONTH, max_posts=25, max_chars=10_000)

    edited = posts(3)
    edited[1] = Post("p001", "a different text", 2)
    again = ledger.sync_posts(
        MONTH, [*edited, Post("p999", "new one", 4)], model="m", analysis=asked()
    )
    assert (again.new, again.unchanged, again.changed) == (1, 2, 1)
    by_id = {p.post_id: p for p in ledger.posts(MONTH)}
    assert by_id["p000"].status is PostStatus.QUEUED
    assert by_id["p001"].status is PostStatus.PENDING and by_id["p001"].text == "a different text"
    assert by_id["p999"].status is PostStatus.PENDING
    why = [e.why for e in ledger.events(MONTH) if e.entity_id == "p001"]
    assert why[-1] == "input changed (text): starts over"

    changed_model = ledger.sync_posts(MONTH, edited, model="other-model", analysis=asked())
    assert changed_model.changed == 3  # R25: a new model is new work for every post
    why = [e.why for e in ledger.events(MONTH) if e.entity_id == "p000"]
    assert why[-1] == "input changed (model): starts over"
    ledger.close()


def test_plan_limits_order_and_too_long(any_ledger_url: str) -> None:
    ledger = Ledger(any_ledger_url)
    sample = [Post(f"p{i:02d}", "y" * (40 if i != 5 else 500), i) for i in range(60)]
    ledger.sync_posts(MONTH, sample, model="m", analysis=asked())
    report = ledger.plan(MONTH, max_posts=25, max_chars=400)

    assert report.too_long == 1
    sizes = [len(b.post_ids) for b in report.batches]
    assert sizes == [10, 10, 10, 10, 10, 9]  # 400 chars / 40 per post
    planned = [pid for b in report.batches for pid in b.post_ids]
    assert planned == [p.id for p in sample if p.id != "p05"]  # file order, deterministic
    too_long = {p.post_id: p for p in ledger.posts(MONTH, PostStatus.FAILED)}
    assert too_long["p05"].failure_kind is FailureKind.TOO_LONG
    assert "500 characters" in (too_long["p05"].failure_reason or "")
    assert "never sent" in (too_long["p05"].failure_reason or "")
    assert too_long["p05"].attempts == 0
    ledger.close()


def test_plan_again_dissolves_unsent_batches(any_ledger_url: str) -> None:
    ledger = Ledger(any_ledger_url)
    ledger.sync_posts(MONTH, posts(30), model="m", analysis=asked())
    first = ledger.plan(MONTH, max_posts=25, max_chars=10_000)
    assert ledger.replan_unsent(MONTH) == 30
    ledger.plan(MONTH, max_posts=10, max_chars=10_000)
    assert [b.status for b in ledger.batches(MONTH, BatchStatus.CANCELLED)] == [
        BatchStatus.CANCELLED
    ] * len(first.batches)
    assert [len(b.post_ids) for b in ledger.batches(MONTH, BatchStatus.QUEUED)] == [10, 10, 10]
    ledger.close()


def test_one_batch_life(any_ledger_url: str) -> None:
    ledger = Ledger(any_ledger_url)
    ledger.sync_posts(MONTH, posts(3), model="m", analysis=asked())
    (batch,) = ledger.plan(MONTH, max_posts=25, max_chars=10_000).batches

    running, sent = started(ledger.mark_running(batch.batch_id))
    assert running.status is BatchStatus.RUNNING
    assert [(p.status, p.attempts) for p in ledger.posts(MONTH)] == [(PostStatus.RUNNING, 1)] * 3
    with pytest.raises(IllegalTransition):
        ledger.mark_running(batch.batch_id)  # never paid twice for one intent

    ledger.record_task_id(batch.batch_id, "task_1")
    raw = write_output([(p.post_id, p.text) for p in sent])
    ledger.save_output(batch.batch_id, raw, {"input_tokens": 1, "output_tokens": 2})
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.RECEIVED}
    finish(ledger, batch.batch_id, raw)

    done = ledger.batch(batch.batch_id)
    assert (done.status, done.upstream_task_id, done.raw_output) == (
        BatchStatus.COMPLETED,
        "task_1",
        raw,
    )
    assert all(p.status is PostStatus.COMPLETED and p.result for p in ledger.posts(MONTH))
    history = [(e.from_status, e.to_status) for e in ledger.events(MONTH) if e.entity_id == "p000"]
    assert history == [
        (None, "pending"),
        ("pending", "queued"),
        ("queued", "running"),
        ("running", "received"),
        ("received", "completed"),
    ]
    ledger.close()


def finish(ledger: Ledger, batch_id: str, raw: str, limits: Limits | None = None) -> None:
    check = check_output(raw, ledger.batch(batch_id).post_ids, asked())
    limits = limits or Limits()
    ledger.apply(
        batch_id,
        after_output(ledger.batch(batch_id), ledger.posts_of(batch_id), check, limits),
        check,
    )


def test_invalid_items_are_retried_and_valid_ones_complete(any_ledger_url: str) -> None:
    ledger = Ledger(any_ledger_url)
    ledger.sync_posts(MONTH, posts(3), model="m", analysis=asked())
    (batch,) = ledger.plan(MONTH, max_posts=25, max_chars=10_000).batches
    ledger.mark_running(batch.batch_id)
    raw = (
        '[{"id": "p000", "category": "praise", "sentiment": "positive", "summary": "ok"},'
        ' {"id": "p001", "category": "nonsense", "sentiment": "positive", "summary": "ok"}]'
    )
    ledger.save_output(batch.batch_id, raw, None)
    finish(ledger, batch.batch_id, raw, Limits(max_attempts=1))
    by_id = {p.post_id: p for p in ledger.posts(MONTH)}
    assert by_id["p000"].status is PostStatus.COMPLETED
    assert by_id["p001"].failure_kind is FailureKind.ATTEMPTS_EXHAUSTED
    assert "category" in (by_id["p001"].failure_reason or "")
    assert "the output has no item for this post" in (by_id["p002"].failure_reason or "")
    ledger.close()


# --- R5: two batches of one month finishing at the same instant ----------------------------


def _two_received_batches(url: str) -> tuple[list[str], list[str]]:
    ledger = Ledger(url)
    ledger.sync_posts(MONTH, posts(50), model="m", analysis=asked())
    batches = ledger.plan(MONTH, max_posts=25, max_chars=100_000).batches
    outputs = []
    for batch in batches:
        _, sent = started(ledger.mark_running(batch.batch_id))
        raw = write_output([(p.post_id, p.text) for p in sent])
        ledger.save_output(batch.batch_id, raw, None)
        outputs.append(raw)
    ledger.close()
    return [b.batch_id for b in batches], outputs


@pytest.mark.parametrize("same_process", [True, False], ids=["threads", "two-ledgers"])
def test_month_writes_are_serialized(any_ledger_url: str, same_process: bool) -> None:
    """Both writers are released at once, and the first is held inside its transaction after
    its first event insert. Without serialization the second would read the same last event
    number and one of the two would be lost or rejected; with it, the second waits."""
    batch_ids, outputs = _two_received_batches(any_ledger_url)
    shared = Ledger(any_ledger_url)
    ledgers = [shared, shared] if same_process else [Ledger(any_ledger_url) for _ in range(2)]
    start = threading.Barrier(2)
    held = threading.Event()
    commits: dict[int, float] = {}
    errors: list[BaseException] = []

    def hold_first_writer(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO EVENTS") and not held.is_set():
            held.set()
            time.sleep(0.5)  # the other writer arrives while this transaction is open

    for ledger in {id(x): x for x in ledgers}.values():
        event.listen(ledger.engine, "before_cursor_execute", hold_first_writer)

    def finish_one(i: int) -> None:
        try:
            start.wait()
            if i == 1:
                held.wait(5)
            finish(ledgers[i], batch_ids[i], outputs[i])
            commits[i] = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=finish_one, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    reader = Ledger(any_ledger_url)
    assert reader.counts(MONTH)[PostStatus.COMPLETED] == 50
    assert {b.status for b in reader.batches(MONTH)} == {BatchStatus.COMPLETED}
    seqs = [e.seq for e in reader.events(MONTH)]
    assert seqs == list(range(1, len(seqs) + 1))
    # The writers did not interleave: each batch's finishing events form one unbroken run.
    finishing = [e.entity_id for e in reader.events(MONTH) if e.to_status == "completed"]
    owner = {pid: i for i, b in enumerate(batch_ids) for pid in reader.batch(b).post_ids}
    owner.update({b: i for i, b in enumerate(batch_ids)})
    runs = [owner[x] for x in finishing]
    assert runs in ([0] * 26 + [1] * 26, [1] * 26 + [0] * 26)
    assert len(commits) == 2
    for ledger in {id(x): x for x in [*ledgers, reader]}.values():
        ledger.close()


def test_an_older_ledger_gets_new_columns_and_keeps_its_work(tmp_path: Path) -> None:
    """A ledger written before `inputs` existed (schema revision 0001): it is upgraded, and a
    post that matches its old fingerprint is the same work, not a change paid for again."""
    from postledger.batches.posts import Post, legacy_fingerprint
    from tests.support.ledgers import ledger_at_baseline

    url = f"sqlite:///{tmp_path / 'old.db'}"
    ledger_at_baseline(
        url,
        post_id="a",
        fingerprint=legacy_fingerprint("hello", "m", "p"),
        status="PENDING",
        result=None,
    )

    ledger = Ledger(url)
    report = ledger.sync_posts(
        "2026-10", [Post(id="a", text="hello", line=1)], model="m", analysis=asked()
    )
    assert (report.unchanged, report.changed) == (1, 0)
    report = ledger.sync_posts(
        "2026-10", [Post(id="a", text="hello", line=1)], model="m", analysis=asked("p2")
    )
    assert report.changed == 1
    ledger.close()


def test_one_run_per_month(any_ledger_url: str) -> None:
    """A second run of a month is refused while the first is alive; a killed run's claim is
    taken over at once on its host, and after its heartbeat went stale elsewhere."""
    import subprocess
    import sys
    from datetime import timedelta

    from sqlmodel import Session

    from postledger.record.claims import STALE
    from postledger.record.models import MonthRunRecord, utcnow
    from postledger.record.month_lease import MonthBusy

    ledger = Ledger(any_ledger_url)
    ledger.leases.claim(MONTH, "run-a")
    ledger.leases.claim(MONTH, "run-a")  # the holder itself may claim again
    ledger.leases.claim("2026-11", "run-b")  # another month is another matter
    with pytest.raises(MonthBusy, match="run-a"):
        ledger.leases.claim(MONTH, "run-b")

    def change(**fields: Any) -> None:
        with Session(ledger.engine) as session:
            record = session.get(MonthRunRecord, MONTH)
            assert record is not None
            for name, value in fields.items():
                setattr(record, name, value)
            session.add(record)
            session.commit()

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    change(pid=gone.pid)  # run-a's process was killed: its claim is free at once
    ledger.leases.claim(MONTH, "run-b")

    change(host="another-machine", heartbeat_at=utcnow())
    with pytest.raises(MonthBusy):
        ledger.leases.claim(MONTH, "run-c")
    change(heartbeat_at=utcnow() - STALE - timedelta(seconds=1))
    ledger.leases.claim(MONTH, "run-c")

    ledger.leases.release(MONTH, "run-b")  # not the holder: nothing happens
    with pytest.raises(MonthBusy):
        ledger.leases.claim(MONTH, "run-d")
    ledger.leases.release(MONTH, "run-c")
    ledger.leases.claim(MONTH, "run-d")
    ledger.close()


def test_the_busy_timeout_is_the_one_given_never_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's settings come from its blocks or its environment, built once and passed: the
    ledger takes the busy timeout it is given, and reads no setting of its own."""
    from postledger.defaults import SQLITE_BUSY_TIMEOUT
    from postledger.ledger import open_ledger

    monkeypatch.setenv("POSTLEDGER_SQLITE_BUSY_TIMEOUT", "7")

    def busy_timeout_ms(ledger: Ledger) -> int:
        with ledger.engine.connect() as connection:
            return int(connection.exec_driver_sql("PRAGMA busy_timeout").scalar_one())

    given = Ledger(f"sqlite:///{tmp_path / 'given.db'}", busy_timeout=2.5)
    default = Ledger(f"sqlite:///{tmp_path / 'default.db'}")
    shared = open_ledger(f"sqlite:///{tmp_path / 'shared.db'}", busy_timeout=4)
    try:
        assert busy_timeout_ms(given) == 2500
        assert busy_timeout_ms(default) == int(SQLITE_BUSY_TIMEOUT * 1000)
        assert busy_timeout_ms(shared) == 4000
    finally:
        for ledger in (given, default, shared):
            ledger.close()
