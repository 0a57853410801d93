"""R20: the ledger becomes unwritable in the middle of a month — a real SQLite write lock held
by another connection past the busy timeout, not a mocked repository. No batch may start
without its record; what batches already sent learn is spilled and imported by the next run."""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from postledger.ledger import open_ledger
from postledger.record.models import BatchStatus, PostStatus, utcnow
from tests.support.ledger_backend import sqlite_ledger_only
from tests.support.months import MONTH, posts_file
from tests.support.simulators import Sim, start_sim
from tests.support.waiting import in_background


@pytest.fixture
def slow_sim(monkeypatch: pytest.MonkeyPatch) -> Any:
    yield from start_sim(monkeypatch, latency=1.5)


@sqlite_ledger_only  # the fault is a real SQLite write lock held past the busy timeout
def test_unwritable_ledger_stops_new_work_and_the_next_run_imports_the_spill(
    prefect_harness: None,
    slow_sim: Sim,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.dispatch import RunStopped
    from flows.monthly import monthly_posts

    monkeypatch.setenv("POSTLEDGER_SQLITE_BUSY_TIMEOUT", "1")
    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "2")
    posts = posts_file(
        tmp_path / "posts.jsonl", 20, ids="p{:02d}", text="The invoice page is blank, #{}."
    )
    thread, outcome = in_background(lambda: monthly_posts(month=MONTH, posts_path=str(posts)))
    deadline = time.monotonic() + 60
    while len(slow_sim.charges()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    # Another writer takes the database and keeps it: every ledger write now fails.
    blocker = sqlite3.connect(str(tmp_path / "ledger.db"), isolation_level=None, timeout=10)
    blocker.execute("BEGIN IMMEDIATE")
    locked_at = utcnow()
    thread.join(60)
    blocker.execute("ROLLBACK")
    blocker.close()

    stopped = outcome.get("error")
    assert isinstance(stopped, RunStopped), outcome
    assert "a ledger write failed" in str(stopped) and "database is locked" in str(stopped)
    ledger = open_ledger(ledger_url)
    by_key = {b.idempotency_key: b for b in ledger.batches(MONTH)}
    charges = slow_sim.charges()
    for charge in charges:  # no paid call without its record, and none started after the lock
        batch = by_key[charge["idempotency_key"]]
        assert batch.started_at is not None and batch.started_at < locked_at
    in_flight = [b for b in ledger.batches(MONTH) if b.status is BatchStatus.RUNNING]
    assert in_flight, "the lock should have caught batches in flight"
    assert all(b.batch_id in str(stopped) for b in in_flight)
    spill_path = tmp_path / f"ledger.db.spill-{MONTH}.jsonl"  # one spill file per month
    spilled = [json.loads(line) for line in spill_path.read_text().splitlines()]
    assert {r["batch_id"] for r in spilled if r["kind"] == "output"} == {
        b.batch_id for b in in_flight
    }

    monthly_posts(month=MONTH, posts_path=str(posts))  # the database is back

    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    assert not spill_path.exists() and list(tmp_path.glob(f"{spill_path.name}.imported-*"))
    charges = slow_sim.charges()
    assert len(charges) == len({c["idempotency_key"] for c in charges})  # nobody paid twice
    paid = Counter(pid for c in charges for pid in c["post_ids"])
    assert {p.post_id: p.attempts for p in ledger.posts(MONTH)} == dict(paid)
    for batch in in_flight:  # finished from the spilled output: its task id, not a new one
        (charge,) = [c for c in charges if c["idempotency_key"] == batch.idempotency_key]
        assert ledger.batch(batch.batch_id).upstream_task_id == charge["task_id"]
