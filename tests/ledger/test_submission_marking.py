"""How many batches one upstream job carries (`postledger.trip.marking.mark_for_job`), on a real
ledger and with no upstream call: in start order, up to the job's limit of lines and bytes, and
never past a batch that may not start (the budget): it and every batch after it stay queued,
unpaid."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from postledger.batches.posts import Post
from postledger.defaults import Price
from postledger.guards.estimates import estimate
from postledger.ledger import Ledger
from postledger.record.models import BatchStatus
from postledger.settings import Settings, UpstreamKind
from postledger.trip import OverBudget, Trip
from postledger.trip.marking import mark_for_job
from postledger.upstreams import facts_of
from postledger.upstreams.openai_batch import OpenAIBatchClient, request_line
from tests.support.ledgers import asked

MONTH = "2026-10"
PRICE = Price(input=150_000, output=600_000)


@pytest.fixture
def planned(tmp_path: Path) -> Ledger:
    """Six batches of five posts, queued."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    posts = [Post(f"p{i:02d}", f"post number {i}", i + 1) for i in range(30)]
    ledger.sync_posts(MONTH, posts, model="m", analysis=asked())
    ledger.plan(MONTH, max_posts=5, max_chars=10_000)
    return ledger


class NoCalls:
    """A port for a trip that only marks: marking makes no upstream call."""

    def __init__(self, settings: Settings) -> None:
        self.facts = facts_of(settings)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"marking called the upstream ({name})")


class Marking:
    def __init__(self, trip: Trip) -> None:
        self.trip = trip

    def mark(self, batch_ids: list[str], holder: str | None) -> Any:
        self.trip.holder = holder
        return mark_for_job(self.trip, batch_ids)


def submission(ledger: Ledger, **settings: Any) -> Marking:
    configured = Settings(
        upstream_kind=UpstreamKind.OPENAI_BATCH,
        upstream_url="http://127.0.0.1:9/v1",
        model="m",
        prompt="p",
        prices={"m": PRICE},
        max_batch_chars=1000,
        **settings,
    )
    return Marking(Trip(ledger, configured, NoCalls(configured), logging.getLogger("test")))


def queued(ledger: Ledger) -> list[str]:
    return [b.batch_id for b in ledger.batches(MONTH, BatchStatus.QUEUED)]


def test_a_job_carries_every_due_batch_up_to_the_configured_most(planned: Ledger) -> None:
    ids = [b.batch_id for b in planned.batches(MONTH)]
    marked, not_started = submission(planned, max_submission_batches=4).mark(ids, holder=None)
    assert [b.batch_id for b in marked] == ids[:4] and not_started is None
    assert {planned.batch(b.batch_id).status for b in marked} == {BatchStatus.RUNNING}
    assert queued(planned) == ids[4:]  # for the next submission


def test_a_job_is_never_made_bigger_than_its_file_may_be(
    planned: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each line's size is known once it is marked (its request kept); before the next one,
    # room is kept for the worst it could be: 7 bytes a character, twice what every request
    # carries besides its posts (the analysis's instructions and schema), 8 KiB.
    worst_line = 7 * 1000 + 2 * len(asked().request_text.encode()) + 8192
    ids = [b.batch_id for b in planned.batches(MONTH)]
    lines = {b: _line_of(planned, b) for b in ids}  # as the adapter will write them
    cap = lines[ids[0]] + lines[ids[1]] + worst_line  # room for exactly three
    monkeypatch.setattr(OpenAIBatchClient, "job_limits", (50_000, cap))
    marked, not_started = submission(planned).mark(ids, holder=None)
    assert [b.batch_id for b in marked] == ids[:3] and not_started is None
    assert queued(planned) == ids[3:]
    assert sum(lines[b.batch_id] for b in marked) <= cap


def _line_of(ledger: Ledger, batch_id: str) -> int:
    """The bytes of the batch's line in the input file, as `OpenAIBatchClient` writes it."""
    posts = [(p.post_id, p.text) for p in ledger.posts_of(batch_id)]
    return len(request_line(batch_id, "m", asked(), posts, json_schema=True).encode())


def test_a_batch_the_budget_holds_back_stops_the_job_there(planned: Ledger) -> None:
    batches = planned.batches(MONTH)
    ids = [b.batch_id for b in batches]
    texts = [p.text for p in planned.posts(MONTH)]
    # Enough for three batches' estimates, not four.
    request_text = asked().request_text
    at_half = PRICE.model_copy(update={"discount_percent": 50})  # the Batch API's price
    three = sum(estimate(at_half, request_text, texts[5 * n : 5 * n + 5]) for n in range(3))
    marked, not_started = submission(planned, max_cost=three + 1).mark(ids, holder=None)
    assert [b.batch_id for b in marked] == ids[:3]
    assert isinstance(not_started, OverBudget) and not_started.batch_id == ids[3]
    assert queued(planned) == ids[3:]  # held back in order: nothing later overtakes it
    assert planned.spend_totals(MONTH)["submissions"] == 3  # nothing booked for the others
