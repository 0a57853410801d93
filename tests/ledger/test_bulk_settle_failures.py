"""A job's delivered lines settled a chunk at a time (`trip.following._settle_ended`) end as
the per-line path ends them when the ledger fails or the month is lost on the way: a chunk
whose outputs the ledger would not take is settled line by line (each output saved, or else
spilled); a run that lost its month saves none of them and spills every output it read, for
the run that holds the month to import. On a real ledger, with no upstream call."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from postledger.guards.spill import Spill
from postledger.ledger import Ledger
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchRecord, BatchStatus
from postledger.record.month_lease import MonthLost
from postledger.settings import Settings, UpstreamKind
from postledger.trip import Trip
from postledger.trip.following import _settle_ended
from postledger.trip.outcome import BatchOutcome, Settled
from postledger.upstreams import facts_of
from postledger.upstreams.calls import Delivered, JobEnded
from tests.ledger.test_bulk_bookkeeping import BULK, MARKING, USAGE, output, plan


class NoCalls:
    def __init__(self, settings: Settings) -> None:
        self.facts = facts_of(settings)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"settling called the upstream ({name})")


def marked(ledger: Ledger, tmp_path: Path) -> tuple[Trip, list[BatchRecord], JobEnded]:
    """Eight batches running in one job, every line delivered."""
    batches, _ = ledger.mark_running_many(plan(ledger, BULK), **MARKING)
    settings = Settings(
        upstream_kind=UpstreamKind.OPENAI_BATCH,
        upstream_url="http://127.0.0.1:9/v1",
        database_url=ledger.url,
        spill_path=tmp_path / "spill.jsonl",
        prompt="p",
    )
    trip = Trip(ledger, settings, NoCalls(settings), logging.getLogger("test"))
    lines = {b.batch_id: Delivered(output(b, "valid"), USAGE) for b in batches}
    return trip, batches, JobEnded(lines)


def settle(trip: Trip, batches: list[BatchRecord], job: JobEnded) -> dict[str, BatchOutcome]:
    outcomes: dict[str, BatchOutcome] = {}
    _settle_ended(trip, {b.batch_id: b for b in batches}, job, "batch_1", outcomes)
    return outcomes


def test_a_chunk_the_ledger_would_not_take_is_settled_line_by_line(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trip, batches, job = marked(ledger, tmp_path)

    def refused(*_: Any, **__: Any) -> None:
        raise LedgerUnavailable("cannot write the ledger: disk I/O error (injected)")

    monkeypatch.setattr(ledger, "save_outputs", refused)
    outcomes = settle(trip, batches, job)
    assert {type(o) for o in outcomes.values()} == {Settled}
    assert {b.status for b in ledger.batches(BULK)} == {BatchStatus.COMPLETED}
    assert not Spill(trip.settings.spill_file(BULK)).records()  # each saved after all


def test_a_run_that_lost_its_month_spills_every_output_it_read(
    ledger: Ledger, tmp_path: Path
) -> None:
    trip, batches, job = marked(ledger, tmp_path)
    ledger.leases.claim(BULK, "the run that holds it now")
    trip.holder = "a run that lost it"
    with pytest.raises(MonthLost):
        settle(trip, batches, job)
    assert trip.lost is not None
    assert {b.status for b in ledger.batches(BULK)} == {BatchStatus.RUNNING}  # nothing saved
    spilled = Spill(trip.settings.spill_file(BULK)).records()
    assert sorted(r["batch_id"] for r in spilled) == sorted(b.batch_id for b in batches)
    assert {r["kind"] for r in spilled} == {"output"}
